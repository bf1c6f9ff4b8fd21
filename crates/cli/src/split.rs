//! Splits SQL text into statements at top-level semicolons (outside quotes and comments),
//! keeping each statement's position so errors report lines of the whole input.

/// A statement's text and where it starts (1-based line and column).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub text: String,
    pub line: usize,
    pub column: usize,
}

impl Piece {
    /// The text padded so that parser positions match the original input.
    pub fn positioned(&self) -> String {
        format!("{}{}{}", "\n".repeat(self.line - 1), " ".repeat(self.column - 1), self.text)
    }
}

/// Splits `sql`; a trailing statement without `;` is included. Returns the pieces and
/// whether the input ends inside an unterminated quote or comment.
pub fn split_statements(sql: &str) -> (Vec<Piece>, bool) {
    let chars: Vec<char> = sql.chars().collect();
    let mut pieces = Vec::new();
    let mut start = 0;
    let (mut line, mut column) = (1usize, 1usize);
    let (mut start_line, mut start_column) = (1usize, 1usize);
    let mut i = 0;
    let mut open = false;
    let advance = |c: char, line: &mut usize, column: &mut usize| {
        if c == '\n' {
            *line += 1;
            *column = 1;
        } else {
            *column += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' | '"' => {
                let quote = c;
                advance(c, &mut line, &mut column);
                i += 1;
                open = true;
                while i < chars.len() {
                    let d = chars[i];
                    advance(d, &mut line, &mut column);
                    i += 1;
                    if d == quote {
                        if i < chars.len() && chars[i] == quote {
                            advance(quote, &mut line, &mut column);
                            i += 1;
                            continue;
                        }
                        open = false;
                        break;
                    }
                }
                continue;
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    advance(chars[i], &mut line, &mut column);
                    i += 1;
                }
                continue;
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                open = true;
                while i < chars.len() {
                    if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        advance('*', &mut line, &mut column);
                        advance('/', &mut line, &mut column);
                        i += 2;
                        open = false;
                        break;
                    }
                    advance(chars[i], &mut line, &mut column);
                    i += 1;
                }
                continue;
            }
            ';' => {
                let text: String = chars[start..i].iter().collect();
                if !is_blank(&text) {
                    pieces.push(Piece { text, line: start_line, column: start_column });
                }
                advance(c, &mut line, &mut column);
                i += 1;
                start = i;
                start_line = line;
                start_column = column;
                continue;
            }
            _ => {}
        }
        advance(c, &mut line, &mut column);
        i += 1;
    }
    let rest: String = chars[start..].iter().collect();
    if !is_blank(&rest) {
        pieces.push(Piece { text: rest, line: start_line, column: start_column });
    }
    (pieces, open)
}

/// Whether text has nothing but whitespace and comments.
fn is_blank(text: &str) -> bool {
    let mut rest = text.trim_start();
    loop {
        if rest.is_empty() {
            return true;
        }
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_outside_quotes_and_comments() {
        let (pieces, open) = split_statements("select 'a;b'; -- c;d\nselect 2;\n/* x; */ select 3");
        assert!(!open);
        let texts: Vec<&str> = pieces.iter().map(|p| p.text.trim()).collect();
        assert_eq!(texts, ["select 'a;b'", "-- c;d\nselect 2", "/* x; */ select 3"]);
        assert_eq!(pieces[1].line, 1);
        assert_eq!(pieces[2].line, 2);
    }

    #[test]
    fn detects_unterminated_input() {
        assert!(split_statements("select 'abc").1);
        assert!(split_statements("select 1 /* x").1);
        assert!(split_statements("-- only a comment").0.is_empty());
    }
}
