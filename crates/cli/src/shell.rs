//! The interactive shell: line editing and history (rustyline), multi-line statements
//! ended by `;`, and dot commands.

use apiary::Connection;
use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::format::Format;
use crate::split::split_statements;

const HELP: &str = "\
.help                 this help
.tables               list tables
.schema TABLE         show a table's columns
.mode table|csv|json  output format
.timer on|off         report statement times
.quit                 exit (also Ctrl-D)
SQL statements end with ';' and may span lines. Ctrl-C cancels a running query.";

fn history_path() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".apiary_history"))
}

pub fn run(conn: &mut Connection, mut format: Format, mut timer: bool) {
    let mut editor = match DefaultEditor::new() {
        Ok(editor) => editor,
        Err(e) => {
            eprintln!("Error: cannot start the line editor: {e}");
            return;
        }
    };
    if let Some(path) = history_path() {
        let _ = editor.load_history(&path);
    }
    println!("Apiary {} — enter SQL statements ending in ';', or .help", env!("CARGO_PKG_VERSION"));
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() { "apiary> " } else { "   ...> " };
        match editor.readline(prompt) {
            Ok(line) => {
                if buffer.is_empty() && line.trim_start().starts_with('.') {
                    let _ = editor.add_history_entry(line.as_str());
                    if !dot_command(conn, line.trim(), &mut format, &mut timer) {
                        break;
                    }
                    continue;
                }
                buffer.push_str(&line);
                buffer.push('\n');
                let (pieces, open) = split_statements(&buffer);
                let complete = !open && buffer.trim_end().ends_with(';');
                if !complete {
                    if pieces.is_empty() && !open {
                        buffer.clear();
                    }
                    continue;
                }
                let _ = editor.add_history_entry(buffer.trim());
                for piece in pieces {
                    crate::run_one(conn, &piece.text, format, timer);
                }
                buffer.clear();
            }
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("Error: {e}");
                break;
            }
        }
    }
    if let Some(path) = history_path() {
        let _ = editor.save_history(&path);
    }
}

/// Handles a dot command; returns false to exit.
fn dot_command(conn: &mut Connection, line: &str, format: &mut Format, timer: &mut bool) -> bool {
    let mut parts = line.split_whitespace();
    let command = parts.next().unwrap_or_default();
    let argument = parts.next();
    match (command, argument) {
        (".quit" | ".exit", _) => return false,
        (".help", _) => println!("{HELP}"),
        (".tables", _) => {
            crate::run_one(conn, "SHOW TABLES", *format, false);
        }
        (".schema", Some(table)) => {
            crate::run_one(conn, &format!("DESCRIBE {table}"), *format, false);
        }
        (".mode", Some("table")) => *format = Format::Table,
        (".mode", Some("csv")) => *format = Format::Csv,
        (".mode", Some("json")) => *format = Format::Json,
        (".timer", Some("on")) => *timer = true,
        (".timer", Some("off")) => *timer = false,
        _ => eprintln!("Error: unknown or incomplete command '{line}' (try .help)"),
    }
    true
}
