//! A linear pre-scan bounding how deeply a YAML text nests, run before the
//! YAML parser sees a request body.
//!
//! Why: libyaml (under serde_yaml) checks every open flow level (`[`, `{`)
//! for each token it reads, so a body like `x: [[[[…]]]]` costs time
//! quadratic in its depth (40,000 levels: seconds of CPU) before the
//! decoder's own recursion limit refuses it. Upstream's decoder
//! (`sigs.k8s.io/yaml` over go-yaml, `parserc.go`'s `max_flow_level` and
//! `max_indents`) refuses deep documents while parsing; this scan refuses them
//! before parsing, in time linear in the body's size, so a YAML body is held
//! to the same nesting limit as a JSON one at the same cost.
//!
//! What is counted: open flow collections (`[`, `{` outside quoted scalars
//! and comments) plus the block collections around them, counted the way
//! libyaml's indentation stack counts them (a new sequence entry `- `,
//! complex key `? ` or mapping key at a column greater than the enclosing
//! one). Text inside quoted scalars, comments and block scalars (`|`, `>`)
//! is skipped. The count never exceeds the depth of the decoded value for
//! the usual shapes of Kubernetes manifests; where YAML is ambiguous without
//! a full parser (a multi-line plain scalar whose continuation line starts
//! with `- `) it may count one level more for that line; what it counts
//! short, the decoder's own limit catches at linear cost.

/// How deep `text` nests (maps and sequences, the outermost counting 1),
/// as soon as that is known to exceed `max`: `Err(depth)` then, `Ok(())`
/// when it never does. Reads each byte at most a few times.
pub fn check(text: &[u8], max: usize) -> Result<(), usize> {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let mut scan = Scan { b: text, i: 0, line_start: 0, indents: Vec::new(), flow: 0, max };
    while scan.i < scan.b.len() {
        scan.line()?;
    }
    Ok(())
}

/// The kind of a block collection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Mapping,
    Sequence,
}

struct Scan<'a> {
    b: &'a [u8],
    /// Next byte to read.
    i: usize,
    /// Where the current line starts (columns are counted from here).
    line_start: usize,
    /// Columns and kinds of the open block collections, innermost last.
    indents: Vec<(usize, Block)>,
    /// Open flow collections.
    flow: usize,
    max: usize,
}

/// Whitespace, a line break, or the end of the text.
fn is_blank(b: Option<u8>) -> bool {
    matches!(b, None | Some(b' ' | b'\t' | b'\r' | b'\n'))
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn peek_at(&self, off: usize) -> Option<u8> {
        self.b.get(self.i + off).copied()
    }

    fn column(&self) -> usize {
        self.i - self.line_start
    }

    fn depth(&self) -> usize {
        self.indents.len() + self.flow
    }

    fn checked(&self) -> Result<(), usize> {
        if self.depth() > self.max {
            return Err(self.depth());
        }
        Ok(())
    }

    /// Moves past the end of the current line.
    fn skip_line(&mut self) {
        match self.b[self.i..].iter().position(|&c| c == b'\n') {
            Some(n) => {
                self.i += n + 1;
                self.line_start = self.i;
            }
            None => self.i = self.b.len(),
        }
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// An entry of a block collection of `kind` starts at column `col`: a
    /// new collection when it is right of the innermost one, or a sequence
    /// at a mapping's own column (an "indentless" sequence, which ends when
    /// the mapping's next key comes).
    fn block_collection(&mut self, col: usize, kind: Block) -> Result<(), usize> {
        let n = self.indents.len();
        match self.indents.last() {
            Some(&(top, top_kind)) if col == top => {
                if kind == Block::Sequence && top_kind == Block::Mapping {
                    self.indents.push((col, kind));
                    self.checked()?;
                } else if kind == Block::Mapping
                    && top_kind == Block::Sequence
                    && n >= 2
                    && self.indents[n - 2] == (col, Block::Mapping)
                {
                    self.indents.pop();
                }
            }
            Some(&(top, _)) if col < top => {}
            _ => {
                self.indents.push((col, kind));
                self.checked()?;
            }
        }
        Ok(())
    }

    /// One line in block context, from its first byte.
    fn line(&mut self) -> Result<(), usize> {
        self.line_start = self.i;
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
        let indent = self.column();
        match self.peek() {
            None => return Ok(()),
            Some(b'\n' | b'\r' | b'#' | b'\t') => {
                self.skip_line();
                return Ok(());
            }
            _ => {}
        }
        let rest = &self.b[self.i..];
        if indent == 0 && (rest.starts_with(b"---") || rest.starts_with(b"...")) && is_blank(rest.get(3).copied()) {
            // A new document: nothing is open any more.
            self.indents.clear();
            if rest[0] == b'.' {
                self.skip_line();
                return Ok(());
            }
            self.i += 3;
        } else if indent == 0 && rest[0] == b'%' {
            self.skip_line();
            return Ok(());
        } else {
            while self.indents.last().is_some_and(|&(top, _)| top > indent) {
                self.indents.pop();
            }
        }
        self.nodes(indent)
    }

    /// The rest of a line in block context, where nodes may start.
    fn nodes(&mut self, line_indent: usize) -> Result<(), usize> {
        loop {
            self.skip_spaces();
            let Some(c) = self.peek() else { return Ok(()) };
            match c {
                b'\n' | b'\r' | b'#' => {
                    self.skip_line();
                    return Ok(());
                }
                b'-' | b'?' if is_blank(self.peek_at(1)) => {
                    let kind = if c == b'-' { Block::Sequence } else { Block::Mapping };
                    self.block_collection(self.column(), kind)?;
                    self.i += 1;
                }
                b':' if is_blank(self.peek_at(1)) => self.i += 1,
                b'[' | b'{' => self.flow_collection()?,
                b'\'' | b'"' => {
                    let col = self.column();
                    self.quoted(c);
                    self.after_key_candidate(col)?;
                }
                b'|' | b'>' => {
                    self.skip_line();
                    self.block_scalar(line_indent);
                    return Ok(());
                }
                b'&' | b'!' | b'*' => {
                    while !is_blank(self.peek()) {
                        self.i += 1;
                    }
                }
                _ => {
                    let col = self.column();
                    if self.plain()? {
                        self.block_collection(col, Block::Mapping)?;
                    }
                }
            }
        }
    }

    /// After a quoted scalar or flow collection that started at `col`: when a
    /// `:` follows, it was a mapping key.
    fn after_key_candidate(&mut self, col: usize) -> Result<(), usize> {
        self.skip_spaces();
        if self.peek() == Some(b':') && is_blank(self.peek_at(1)) {
            self.block_collection(col, Block::Mapping)?;
            self.i += 1;
        }
        Ok(())
    }

    /// A plain scalar in block context; `Ok(true)` when it is a mapping key
    /// (the `:` is consumed). Stops before a line break or a comment.
    fn plain(&mut self) -> Result<bool, usize> {
        while let Some(c) = self.peek() {
            match c {
                b'\n' | b'\r' => return Ok(false),
                b':' if is_blank(self.peek_at(1)) => {
                    self.i += 1;
                    return Ok(true);
                }
                b' ' | b'\t' if self.peek_at(1) == Some(b'#') => return Ok(false),
                _ => self.i += 1,
            }
        }
        Ok(false)
    }

    /// A quoted scalar opened by `q` at `self.i`; it may span lines.
    fn quoted(&mut self, q: u8) {
        self.i += 1;
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'\n' => self.line_start = self.i,
                b'\\' if q == b'"' => {
                    if self.peek() == Some(b'\n') {
                        self.line_start = self.i + 1;
                    }
                    self.i += 1;
                }
                b'\'' if q == b'\'' && self.peek() == Some(b'\'') => self.i += 1,
                _ if c == q => return,
                _ => {}
            }
        }
        self.i = self.i.min(self.b.len());
    }

    /// The lines of a block scalar whose header ended the previous line:
    /// every following line that is blank or indented more than
    /// `parent_indent` (at least as much as its first non-blank line).
    fn block_scalar(&mut self, parent_indent: usize) {
        let mut content_indent: Option<usize> = None;
        while self.i < self.b.len() {
            let start = self.i;
            let spaces = self.b[start..].iter().take_while(|&&c| c == b' ').count();
            let after = self.b.get(start + spaces).copied();
            let blank = matches!(after, None | Some(b'\n' | b'\r'));
            let inside = blank
                || match content_indent {
                    None => spaces > parent_indent,
                    Some(n) => spaces >= n,
                };
            if !inside {
                self.i = start;
                self.line_start = start;
                return;
            }
            if !blank && content_indent.is_none() {
                content_indent = Some(spaces);
            }
            self.skip_line();
        }
    }

    /// A flow collection opened at `self.i`; returns after it closes (or at
    /// the end of the text). Flow collections may span lines.
    fn flow_collection(&mut self) -> Result<(), usize> {
        let col = self.column();
        while let Some(c) = self.peek() {
            let prev = if self.i > 0 { self.b[self.i - 1] } else { b'\n' };
            match c {
                b'[' | b'{' => {
                    self.flow += 1;
                    self.checked()?;
                    self.i += 1;
                }
                b']' | b'}' => {
                    self.i += 1;
                    self.flow = self.flow.saturating_sub(1);
                    if self.flow == 0 {
                        return self.after_key_candidate(col);
                    }
                }
                b'\'' | b'"' if matches!(prev, b'[' | b'{' | b',' | b':' | b'?' | b' ' | b'\t' | b'\n' | b'\r') => {
                    self.quoted(c);
                }
                b'#' if matches!(prev, b' ' | b'\t' | b'\n' | b'\r') => self.skip_line(),
                b'\n' => {
                    self.i += 1;
                    self.line_start = self.i;
                }
                _ => self.i += 1,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check;
    use serde_json::{json, Value};

    /// The depth the scan reports for `text` (the smallest `max` it accepts).
    fn scanned_depth(text: &str) -> usize {
        (0..200).find(|&max| check(text.as_bytes(), max).is_ok()).expect("depth under 200")
    }

    fn decoded_depth(text: &str) -> usize {
        let v: Value = serde_yaml::from_str(text).expect("valid YAML");
        crate::patch::json::nesting_depth(&v)
    }

    #[test]
    fn counts_what_the_decoder_builds() {
        let docs = [
            "a: 1\n",
            "a:\n  b:\n    c: 1\n",
            "- - - x\n",
            "- a: 1\n  b:\n    - c\n    - d: [1, {e: 2}]\n",
            "a: [[[1]]]\nb: {c: {d: 1}}\n",
            "a: \"[[[[ not [ nested\"\nb: 'it''s [[[['\n",
            "# [[[[[ comment\na: x # {{{{\n",
            "a: |\n  [[[[[ literal\n  {{{{\n    - - - -\nb: 1\n",
            "a: >-\n  folded [[[\n\n  more {{{\nb:\n  c: 1\n",
            "a: plain [text] with {braces\nb: c:d\n",
            "a: [\n  1,\n  [2, \"]\"],\n  {b: 'x}'}\n]\n",
            "\"quoted key\":\n  'another': [1]\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {app: web}\ndata:\n  k: v\n",
            "a: &anchor\n  b: 1\nc: *anchor\n",
            "a: !!str '[['\nb: [!!str '[[' , x]\n",
            "a:\r\n  b: [1]\r\n",
        ];
        for doc in docs {
            assert_eq!(scanned_depth(doc), decoded_depth(doc), "{doc:?}");
        }
        // Indentless sequences (`key:` then `- item` at the key's column).
        for doc in ["a:\n- b:\n  - c\n", "a:\n- x\nb:\n- y\n", "a:\n- x\nb: {c: 1}\n- - 1\n"] {
            if let Ok(v) = serde_yaml::from_str::<Value>(doc) {
                assert_eq!(scanned_depth(doc), crate::patch::json::nesting_depth(&v), "{doc:?}");
            }
        }
        assert_eq!(scanned_depth("a:\n- b:\n  - c\n"), 4);
        // Each document of a stream is counted on its own.
        assert_eq!(scanned_depth("a: [[1]]\n---\n- [2]\n...\n--- [3]\n"), 3);
    }

    #[test]
    fn what_serde_yaml_writes_is_counted_exactly() {
        for depth in [1usize, 2, 10, 127, 128] {
            let map = (1..depth).fold(json!("x"), |v, _| json!({ "a": v }));
            let map = json!({ "m": map });
            let seq = (1..depth).fold(json!("x"), |v, _| json!([v]));
            let seq = json!({ "s": seq });
            for v in [map, seq] {
                let text = serde_yaml::to_string(&v).unwrap();
                assert_eq!(scanned_depth(&text), crate::patch::json::nesting_depth(&v), "{text}");
            }
        }
    }

    #[test]
    fn deep_nesting_is_refused_early() {
        let n = 250_000;
        for text in [
            format!("x: {}{}", "[".repeat(n), "]".repeat(n)),
            format!("x: {}1{}", "{a: ".repeat(n), "}".repeat(n)),
            format!("x:\n{}1\n", "- ".repeat(n)),
            (0..3000).map(|i| format!("{}a:\n", " ".repeat(i))).collect::<String>(),
        ] {
            assert_eq!(check(text.as_bytes(), 127), Err(128), "{}", &text[..40]);
        }
    }

    #[test]
    fn unterminated_input_ends_the_scan() {
        for text in ["a: \"open", "a: 'open", "a: [1, 2", "a: |\n", "a: {b: [", "\u{feff}a: 1", "- ", "? "] {
            assert!(check(text.as_bytes(), 127).is_ok(), "{text:?}");
        }
    }
}
