//! Printing results as a table, CSV or JSON lines.

use apiary::{DataType, QueryResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

fn cells(result: &QueryResult) -> Vec<Vec<Option<String>>> {
    result
        .chunks
        .iter()
        .flat_map(|chunk| (0..chunk.row_count()).map(move |r| (0..chunk.column_count()).map(|c| result.cell_text(chunk, r, c)).collect()))
        .collect()
}

fn is_numeric(t: &DataType) -> bool {
    t.is_numeric()
}

/// Rows rendered between two calls of the output callback (so a long result can be
/// stopped while it prints).
const ROWS_PER_PIECE: usize = 1000;

/// Renders a result in `format`, piece by piece into `emit`, which returns false to stop (Ctrl-C while
/// a long result prints); returns whether the whole result was rendered. Statements
/// without rows render as nothing in CSV and JSON, and as a short confirmation in table
/// mode.
pub fn render_into(result: &QueryResult, format: Format, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    if !result.has_rows() {
        if format == Format::Table {
            if let apiary::ResultKind::Statement { rows_affected: Some(n) } = result.kind {
                return emit(&format!("{n} row{} affected\n", if n == 1 { "" } else { "s" }));
            }
        }
        return true;
    }
    let text = match format {
        Format::Table => render_table(result),
        Format::Csv => render_csv(result),
        Format::Json => render_json(result),
    };
    // Pieces of whole lines.
    let mut lines = 0;
    let mut start = 0;
    for (at, _) in text.match_indices('\n') {
        lines += 1;
        if lines % ROWS_PER_PIECE == 0 {
            if !emit(&text[start..=at]) {
                return false;
            }
            start = at + 1;
        }
    }
    start >= text.len() || emit(&text[start..])
}

fn render_table(result: &QueryResult) -> String {
    let rows = cells(result);
    let shown: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| c.clone().unwrap_or_else(|| "NULL".to_string())).collect()).collect();
    let type_names: Vec<String> = result.types.iter().map(|t| t.to_string().to_lowercase()).collect();
    let mut widths: Vec<usize> = result.columns.iter().zip(&type_names).map(|(c, t)| c.chars().count().max(t.chars().count())).collect();
    for row in &shown {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, left: &str, mid: &str, right: &str| {
        out.push_str(left);
        for (i, w) in widths.iter().enumerate() {
            if i > 0 {
                out.push_str(mid);
            }
            out.push_str(&"─".repeat(w + 2));
        }
        out.push_str(right);
        out.push('\n');
    };
    let pad = |text: &str, width: usize, right: bool| {
        let fill = " ".repeat(width - text.chars().count());
        if right {
            format!("{fill}{text}")
        } else {
            format!("{text}{fill}")
        }
    };
    line(&mut out, "┌", "┬", "┐");
    out.push('│');
    for (i, name) in result.columns.iter().enumerate() {
        out.push_str(&format!(" {} │", pad(name, widths[i], false)));
    }
    out.push('\n');
    out.push('│');
    for (i, t) in type_names.iter().enumerate() {
        out.push_str(&format!(" {} │", pad(t, widths[i], false)));
    }
    out.push('\n');
    line(&mut out, "├", "┼", "┤");
    for row in &shown {
        out.push('│');
        for (i, cell) in row.iter().enumerate() {
            out.push_str(&format!(" {} │", pad(cell, widths[i], is_numeric(&result.types[i]))));
        }
        out.push('\n');
    }
    line(&mut out, "└", "┴", "┘");
    let n = rows.len();
    out.push_str(&format!("({n} row{})\n", if n == 1 { "" } else { "s" }));
    out
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) || text.is_empty() {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn render_csv(result: &QueryResult) -> String {
    let mut out = result.columns.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(",");
    out.push('\n');
    for row in cells(result) {
        let fields: Vec<String> = row
            .iter()
            .zip(&result.types)
            .map(|(cell, t)| match cell {
                None => String::new(),
                Some(text) if t.is_string() => csv_field(text),
                Some(text) => text.clone(),
            })
            .collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

fn json_value(cell: &Option<String>, t: &DataType) -> String {
    match cell {
        None => "null".to_string(),
        Some(text) => match t {
            DataType::Boolean => text.clone(),
            t if t.is_integer() || t.is_decimal() => text.clone(),
            t if t.is_float() => {
                if text.parse::<f64>().is_ok_and(|f| f.is_finite()) {
                    text.clone()
                } else {
                    serde_json::to_string(text).unwrap_or_default()
                }
            }
            _ => serde_json::to_string(text).unwrap_or_default(),
        },
    }
}

fn render_json(result: &QueryResult) -> String {
    let columns: Vec<String> = result.columns.iter().map(|c| serde_json::to_string(c).unwrap_or_default()).collect();
    let types: Vec<String> = result.types.iter().map(|t| serde_json::to_string(&t.to_string()).unwrap_or_default()).collect();
    let rows: Vec<String> = cells(result)
        .iter()
        .map(|row| format!("[{}]", row.iter().zip(&result.types).map(|(c, t)| json_value(c, t)).collect::<Vec<_>>().join(",")))
        .collect();
    format!("{{\"columns\":[{}],\"types\":[{}],\"rows\":[{}]}}\n", columns.join(","), types.join(","), rows.join(","))
}
