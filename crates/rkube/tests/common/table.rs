//! Reading kubectl's human-readable output: tables (`get`, `api-resources`)
//! and `describe` key/value blocks.

/// A parsed kubectl table: the header cells and each row's cells, cut at the
/// column starts of the header (kubectl aligns columns with a tabwriter, at
/// least 3 spaces apart), so an empty cell stays an empty string.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Header cells, e.g. `["NAME", "READY", "STATUS", "RESTARTS", "AGE"]`.
    pub header: Vec<String>,
    /// Row cells, one `Vec` per line after the header.
    pub rows: Vec<Vec<String>>,
}

/// Splits a header line into (start offset, cell) at runs of 2+ spaces.
fn header_cells(line: &str) -> Vec<(usize, String)> {
    let bytes = line.as_bytes();
    let mut cells = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len()
            && !(bytes[i] == b' ' && (i + 1 >= bytes.len() || bytes[i + 1] == b' '))
        {
            i += 1;
        }
        cells.push((start, line[start..i].to_owned()));
    }
    cells
}

impl Table {
    /// Parses kubectl table output (first non-empty line is the header).
    #[track_caller]
    pub fn parse(out: &str) -> Table {
        let mut lines = out.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else {
            panic!("no table in output: {out:?}")
        };
        let cols = header_cells(head);
        let rows = lines
            .map(|l| {
                cols.iter()
                    .enumerate()
                    .map(|(i, (start, _))| {
                        let end = cols
                            .get(i + 1)
                            .map(|c| c.0)
                            .unwrap_or(usize::MAX)
                            .min(l.len());
                        l.get((*start).min(l.len())..end)
                            .unwrap_or("")
                            .trim()
                            .to_owned()
                    })
                    .collect()
            })
            .collect();
        Table {
            header: cols.into_iter().map(|c| c.1).collect(),
            rows,
        }
    }

    /// Index of the column named `name`.
    #[track_caller]
    pub fn col(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.header))
    }

    /// The row whose `key_col` cell equals `key`.
    #[track_caller]
    pub fn row(&self, key_col: &str, key: &str) -> Vec<String> {
        let i = self.col(key_col);
        self.rows
            .iter()
            .find(|r| r[i] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no row with {key_col}={key} in {:#?}", self))
    }

    /// `cell(row, column name)`.
    #[track_caller]
    pub fn cell<'a>(&self, row: &'a [String], name: &str) -> &'a str {
        &row[self.col(name)]
    }

    /// The values of column `name`, top to bottom.
    #[track_caller]
    pub fn column(&self, name: &str) -> Vec<String> {
        let i = self.col(name);
        self.rows.iter().map(|r| r[i].clone()).collect()
    }

    /// The header as `&str`s, for `assert_eq!`.
    pub fn header_strs(&self) -> Vec<&str> {
        self.header.iter().map(String::as_str).collect()
    }
}

/// The header strings of a table printed by kubectl.
#[track_caller]
pub fn header_of(out: &str) -> Vec<String> {
    Table::parse(out).header
}

/// True if `age` looks like a kubectl age cell (`0s`, `12s`, `3m4s`, ...).
pub fn is_age(age: &str) -> bool {
    !age.is_empty()
        && age.chars().next().is_some_and(|c| c.is_ascii_digit())
        && age
            .chars()
            .all(|c| c.is_ascii_digit() || "smhdy".contains(c))
}

/// The value after `key:` on the first line of a `describe` output whose
/// trimmed text starts with `key:` and that is indented by `indent` spaces.
#[track_caller]
pub fn describe_value(out: &str, indent: usize, key: &str) -> String {
    let prefix = format!("{key}:");
    out.lines()
        .find(|l| {
            let trimmed = l.trim_start();
            l.len() - trimmed.len() == indent && trimmed.starts_with(&prefix)
        })
        .map(|l| l.trim_start()[prefix.len()..].trim().to_owned())
        .unwrap_or_else(|| panic!("no `{key}:` at indent {indent} in describe output:\n{out}"))
}
