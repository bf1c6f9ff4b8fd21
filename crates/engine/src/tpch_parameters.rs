//! TPC-H substitution parameters (TPC-H specification §2.4): a query's text with its
//! parameters drawn at random from the ranges the specification gives, so that
//! concurrent copies of one query differ in their constants (work sharing must not
//! depend on identical text; a result cache would not help).
//!
//! Each query's text in `tpch/queries` uses the validation parameters; a substitution
//! replaces each of those literals by a drawn value. Queries without a substitution here
//! keep their validation parameters (see [`has_random_parameters`]).

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
        choices[self.range(0, choices.len() as i64 - 1) as usize]
    }
}

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
/// validation text).
pub fn has_random_parameters(number: usize) -> bool {
    matches!(number, 1 | 3 | 5 | 6 | 9 | 10 | 12 | 14)
}

/// `YYYY-MM-DD`.
fn date(year: i64, month: i64, day: i64) -> String {
    format!("{year:04}-{month:02}-{day:02}")
}

/// Query `number`'s text with parameters drawn from `rng`.
pub fn random_query(number: usize, rng: &mut ParameterRng) -> Result<String> {
    let text = crate::tpch::query(number).ok_or_else(|| internal_err!("there is no TPC-H query {number}"))?;
    let substitutions: Vec<(&str, String)> = match number {
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
    let mut query = text.to_string();
    for (validation, value) in substitutions {
        if !query.contains(validation) {
            return Err(internal_err!("TPC-H query {number} has no {validation} to substitute"));
        }
        query = query.replace(validation, &value);
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
