//! TPC-H substitution parameters (TPC-H specification §2.4): a query's text with its
//! parameters drawn at random from the ranges the specification gives, so that
//! concurrent copies of one query differ in their constants (work sharing must not
//! depend on identical text; a result cache would not help).
//!
//! Each query's text in `tpch/queries` uses the validation parameters; a substitution
//! replaces each of those literals (every occurrence) by a drawn value. All 22 queries
//! draw parameters; Q11's FRACTION stays 0.0001 (the specification scales it with the
//! scale factor, which the text does not know).

use apiary_common::{internal_err, Result};

/// A small deterministic generator (splitmix64): the same seed gives the same texts.
pub struct ParameterRng(u64);

impl ParameterRng {
    pub fn new(seed: u64) -> Self {
        ParameterRng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `low..=high`.
    fn range(&mut self, low: i64, high: i64) -> i64 {
        low + (self.next() % (high - low + 1) as u64) as i64
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }

    /// A value below `len` (an index into `len` choices).
    pub fn below(&mut self, len: usize) -> usize {
        self.range(0, len as i64 - 1) as usize
    }

    /// `count` distinct values of `low..=high`, in drawing order.
    fn distinct(&mut self, count: usize, low: i64, high: i64) -> Vec<i64> {
        let mut values = Vec::with_capacity(count);
        while values.len() < count {
            let value = self.range(low, high);
            if !values.contains(&value) {
                values.push(value);
            }
        }
        values
    }

    /// `Brand#MN` with M and N in 1..=5.
    fn brand(&mut self) -> String {
        format!("Brand#{}{}", self.range(1, 5), self.range(1, 5))
    }

    fn nation(&mut self) -> (&'static str, usize) {
        NATIONS[self.below(NATIONS.len())]
    }

    /// The first day of a month from January 1993 to October 1997 (Q4, Q15).
    fn month_start(&mut self) -> String {
        let month = self.range(0, 57);
        date(1993 + month / 12, month % 12 + 1, 1)
    }
}

/// The 25 nations by key, with their region's key (specification §4.2.3).
const NATIONS: [(&str, usize); 25] = [
    ("ALGERIA", 0),
    ("ARGENTINA", 1),
    ("BRAZIL", 1),
    ("CANADA", 1),
    ("EGYPT", 4),
    ("ETHIOPIA", 0),
    ("FRANCE", 3),
    ("GERMANY", 3),
    ("INDIA", 2),
    ("INDONESIA", 2),
    ("IRAN", 4),
    ("IRAQ", 4),
    ("JAPAN", 2),
    ("JORDAN", 4),
    ("KENYA", 0),
    ("MOROCCO", 0),
    ("MOZAMBIQUE", 0),
    ("PERU", 1),
    ("CHINA", 2),
    ("ROMANIA", 3),
    ("SAUDI ARABIA", 4),
    ("VIETNAM", 2),
    ("RUSSIA", 3),
    ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
];
/// The syllables of `p_type`.
const TYPE_SIZES: [&str; 6] = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"];
const TYPE_FINISHES: [&str; 5] = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"];
const TYPE_METALS: [&str; 5] = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"];
/// The syllables of `p_container`.
const CONTAINER_SIZES: [&str; 5] = ["SM", "LG", "MED", "JUMBO", "WRAP"];
const CONTAINER_KINDS: [&str; 8] = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"];
/// Q13's words.
const Q13_FIRST_WORDS: [&str; 4] = ["special", "pending", "unusual", "express"];
const Q13_SECOND_WORDS: [&str; 4] = ["packages", "requests", "accounts", "deposits"];
const SEGMENTS: [&str; 5] = ["AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD"];
const REGIONS: [&str; 5] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"];
const SHIP_MODES: [&str; 7] = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"];
/// The colours `p_name` is made of (specification §4.2.3).
const COLORS: [&str; 92] = [
    "almond",
    "antique",
    "aquamarine",
    "azure",
    "beige",
    "bisque",
    "black",
    "blanched",
    "blue",
    "blush",
    "brown",
    "burlywood",
    "burnished",
    "chartreuse",
    "chiffon",
    "chocolate",
    "coral",
    "cornflower",
    "cornsilk",
    "cream",
    "cyan",
    "dark",
    "deep",
    "dim",
    "dodger",
    "drab",
    "firebrick",
    "floral",
    "forest",
    "frosted",
    "gainsboro",
    "ghost",
    "goldenrod",
    "green",
    "grey",
    "honeydew",
    "hot",
    "indian",
    "ivory",
    "khaki",
    "lace",
    "lavender",
    "lawn",
    "lemon",
    "light",
    "lime",
    "linen",
    "magenta",
    "maroon",
    "medium",
    "metallic",
    "midnight",
    "mint",
    "misty",
    "moccasin",
    "navajo",
    "navy",
    "olive",
    "orange",
    "orchid",
    "pale",
    "papaya",
    "peach",
    "peru",
    "pink",
    "plum",
    "powder",
    "puff",
    "purple",
    "red",
    "rose",
    "rosy",
    "royal",
    "saddle",
    "salmon",
    "sandy",
    "seashell",
    "sienna",
    "sky",
    "slate",
    "smoke",
    "snow",
    "spring",
    "steel",
    "tan",
    "thistle",
    "tomato",
    "turquoise",
    "violet",
    "wheat",
    "white",
    "yellow",
];

/// Whether [`random_query`] draws parameters for query `number` (else it returns the
/// validation text): every TPC-H query does.
pub fn has_random_parameters(number: usize) -> bool {
    (1..=22).contains(&number)
}

/// `YYYY-MM-DD`.
fn date(year: i64, month: i64, day: i64) -> String {
    format!("{year:04}-{month:02}-{day:02}")
}

/// Query `number`'s text with parameters drawn from `rng`.
pub fn random_query(number: usize, rng: &mut ParameterRng) -> Result<String> {
    let text = crate::tpch::query(number).ok_or_else(|| internal_err!("there is no TPC-H query {number}"))?;
    let substitutions: Vec<(&str, String)> = match number {
        2 => {
            let size = rng.range(1, 50);
            vec![
                ("p_size = 15", format!("p_size = {size}")),
                ("'%BRASS'", format!("'%{}'", rng.pick(&TYPE_METALS))),
                ("'EUROPE'", format!("'{}'", rng.pick(&REGIONS))),
            ]
        }
        4 => vec![("'1993-07-01'", format!("'{}'", rng.month_start()))],
        7 => {
            let first = rng.below(NATIONS.len());
            let second = (first + 1 + rng.below(NATIONS.len() - 1)) % NATIONS.len();
            vec![("'FRANCE'", format!("'{}'", NATIONS[first].0)), ("'GERMANY'", format!("'{}'", NATIONS[second].0))]
        }
        8 => {
            let (nation, region) = rng.nation();
            let part_type = format!("{} {} {}", rng.pick(&TYPE_SIZES), rng.pick(&TYPE_FINISHES), rng.pick(&TYPE_METALS));
            vec![
                ("'BRAZIL'", format!("'{nation}'")),
                ("'AMERICA'", format!("'{}'", REGIONS[region])),
                ("'ECONOMY ANODIZED STEEL'", format!("'{part_type}'")),
            ]
        }
        11 => vec![("'GERMANY'", format!("'{}'", rng.nation().0))],
        13 => {
            let words = format!("'%{}%{}%'", rng.pick(&Q13_FIRST_WORDS), rng.pick(&Q13_SECOND_WORDS));
            vec![("'%special%requests%'", words)]
        }
        15 => vec![("'1996-01-01'", format!("'{}'", rng.month_start()))],
        16 => {
            let part_type = format!("'{} {}%'", rng.pick(&TYPE_SIZES), rng.pick(&TYPE_FINISHES));
            let sizes: Vec<String> = rng.distinct(8, 1, 50).iter().map(i64::to_string).collect();
            vec![
                ("'Brand#45'", format!("'{}'", rng.brand())),
                ("'MEDIUM POLISHED%'", part_type),
                ("(49, 14, 23, 45, 19, 3, 36, 9)", format!("({})", sizes.join(", "))),
            ]
        }
        17 => {
            let container = format!("'{} {}'", rng.pick(&CONTAINER_SIZES), rng.pick(&CONTAINER_KINDS));
            vec![("'Brand#23'", format!("'{}'", rng.brand())), ("'MED BOX'", container)]
        }
        18 => vec![("sum(l_quantity) > 300", format!("sum(l_quantity) > {}", rng.range(312, 315)))],
        19 => {
            let (q1, q2, q3) = (rng.range(1, 10), rng.range(10, 20), rng.range(20, 30));
            vec![
                ("'Brand#12'", format!("'{}'", rng.brand())),
                ("'Brand#23'", format!("'{}'", rng.brand())),
                ("'Brand#34'", format!("'{}'", rng.brand())),
                ("l_quantity >= 1 and l_quantity <= 1 + 10", format!("l_quantity >= {q1} and l_quantity <= {q1} + 10")),
                ("l_quantity >= 10 and l_quantity <= 10 + 10", format!("l_quantity >= {q2} and l_quantity <= {q2} + 10")),
                ("l_quantity >= 20 and l_quantity <= 20 + 10", format!("l_quantity >= {q3} and l_quantity <= {q3} + 10")),
            ]
        }
        20 => {
            let year = date(rng.range(1993, 1997), 1, 1);
            vec![
                ("'forest%'", format!("'{}%'", rng.pick(&COLORS))),
                ("'1994-01-01'", format!("'{year}'")),
                ("'CANADA'", format!("'{}'", rng.nation().0)),
            ]
        }
        21 => vec![("'SAUDI ARABIA'", format!("'{}'", rng.nation().0))],
        22 => {
            // Country codes are nation keys plus 10.
            let codes: Vec<String> = rng.distinct(7, 10, 34).iter().map(|c| format!("'{c}'")).collect();
            vec![("('13', '31', '23', '29', '30', '18', '17')", format!("({})", codes.join(", ")))]
        }
        1 => vec![("interval '90' day", format!("interval '{}' day", rng.range(60, 120)))],
        3 => {
            let day = date(1995, 3, rng.range(1, 31));
            vec![("'BUILDING'", format!("'{}'", rng.pick(&SEGMENTS))), ("'1995-03-15'", format!("'{day}'"))]
        }
        5 => {
            let year = date(rng.range(1993, 1997), 1, 1);
            vec![("'ASIA'", format!("'{}'", rng.pick(&REGIONS))), ("'1994-01-01'", format!("'{year}'"))]
        }
        6 => {
            let year = date(rng.range(1993, 1997), 1, 1);
            let discount = format!("0.0{}", rng.range(2, 9));
            let quantity = rng.range(24, 25).to_string();
            vec![("'1994-01-01'", format!("'{year}'")), ("0.06", discount), ("< 24", format!("< {quantity}"))]
        }
        9 => vec![("'%green%'", format!("'%{}%'", rng.pick(&COLORS)))],
        10 => {
            // The first of a month from February 1993 to January 1995.
            let month = rng.range(0, 23) + 1;
            let first = date(1993 + month / 12, month % 12 + 1, 1);
            vec![("'1993-10-01'", format!("'{first}'"))]
        }
        12 => {
            let first = rng.range(0, 6) as usize;
            let second = (first + 1 + rng.range(0, 5) as usize) % SHIP_MODES.len();
            let year = date(rng.range(1993, 1997), 1, 1);
            vec![
                ("('MAIL', 'SHIP')", format!("('{}', '{}')", SHIP_MODES[first], SHIP_MODES[second])),
                ("'1994-01-01'", format!("'{year}'")),
            ]
        }
        14 => {
            let month = rng.range(0, 59);
            vec![("'1995-09-01'", format!("'{}'", date(1993 + month / 12, month % 12 + 1, 1)))]
        }
        _ => Vec::new(),
    };
    // Two passes, so that a drawn value equal to a later validation literal (Q7's two
    // nations, Q19's brands) is not substituted again.
    let mut query = text.to_string();
    for (index, (validation, _)) in substitutions.iter().enumerate() {
        if !query.contains(validation) {
            return Err(internal_err!("TPC-H query {number} has no {validation} to substitute"));
        }
        query = query.replace(validation, &format!("\u{1}{index}\u{1}"));
    }
    for (index, (_, value)) in substitutions.iter().enumerate() {
        query = query.replace(&format!("\u{1}{index}\u{1}"), value);
    }
    Ok(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutions_change_the_constants_and_repeat_with_the_seed() {
        for number in 1..=22 {
            let mut rng = ParameterRng::new(7);
            let drawn: Vec<String> = (0..8).map(|_| random_query(number, &mut rng).unwrap()).collect();
            let mut again = ParameterRng::new(7);
            assert_eq!(random_query(number, &mut again).unwrap(), drawn[0]);
            let distinct: std::collections::HashSet<&String> = drawn.iter().collect();
            if has_random_parameters(number) {
                assert!(distinct.len() > 1, "query {number} drew the same text 8 times");
            } else {
                assert_eq!(drawn[0], crate::tpch::query(number).unwrap());
            }
        }
    }
}
