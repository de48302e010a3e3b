//! GBNF grammars (llama.cpp's format, also accepted by vLLM/xgrammar): a parser for the grammar
//! text and an Earley recogniser that decides whether a whole output matches the `root` rule.
//!
//! Supported: rules `name ::= …`, alternatives `|`, groups `( … )`, string literals `"…"`,
//! character classes `[a-z]` / `[^…]`, any character `.`, repetitions `*` `+` `?` `{m}` `{m,}`
//! `{m,n}`, escapes `\n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH`, and `#` comments. Names may
//! use letters, digits, `-` and `_`. A rule ends at a newline unless inside parentheses or after `|`.

use std::collections::HashMap;
use std::fmt;

/// Longest output the recogniser takes (characters); longer outputs fail with a reason.
pub const MAX_INPUT_CHARS: usize = 256 * 1024;
/// Most Earley items one match may create before it gives up with a reason.
const MAX_ITEMS: usize = 20_000_000;
/// Deepest nesting of parentheses in a grammar.
const MAX_NESTING: usize = 64;
/// Largest bound in `{m,n}`.
const MAX_REPEAT: u32 = 1024;

/// A set of characters: ranges, possibly negated (`.` is the negated empty set).
#[derive(Debug, Clone, PartialEq, Eq)]
struct CharClass {
    negated: bool,
    ranges: Vec<(char, char)>,
}

impl CharClass {
    fn single(c: char) -> Self {
        Self {
            negated: false,
            ranges: vec![(c, c)],
        }
    }

    fn matches(&self, c: char) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Sym {
    Char(CharClass),
    Rule(usize),
}

#[derive(Debug)]
struct Production {
    lhs: usize,
    rhs: Vec<Sym>,
}

/// A compiled GBNF grammar.
#[derive(Debug)]
pub struct Grammar {
    productions: Vec<Production>,
    by_lhs: Vec<Vec<usize>>,
    nullable: Vec<bool>,
    root: usize,
}

/// A grammar text that is not valid GBNF: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarError {
    /// 1-based line in the grammar text.
    pub line: usize,
    /// 1-based column (characters).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for GrammarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

impl std::error::Error for GrammarError {}

impl Grammar {
    /// Parses GBNF text; the start rule is `root`.
    pub fn parse(text: &str) -> Result<Self, GrammarError> {
        let mut parser = Parser {
            src: text.chars().collect(),
            pos: 0,
            names: Vec::new(),
            ids: HashMap::new(),
            defined: Vec::new(),
            first_use: Vec::new(),
            productions: Vec::new(),
        };
        parser.parse_grammar()?;
        parser.finish()
    }

    /// Whether `text` as a whole matches the `root` rule; `Err` says where it stops matching.
    pub fn check(&self, text: &str) -> Result<(), String> {
        let chars: Vec<char> = text.chars().collect();
        if chars.len() > MAX_INPUT_CHARS {
            return Err(format!(
                "output has {} characters; the grammar check takes at most {MAX_INPUT_CHARS}",
                chars.len()
            ));
        }
        let mut chart = Chart::new(chars.len());
        for &p in &self.by_lhs[self.root] {
            chart.add(
                0,
                Item {
                    prod: p,
                    dot: 0,
                    origin: 0,
                },
                &self.productions,
            );
        }
        for i in 0..=chars.len() {
            let mut j = 0;
            while let Some(&item) = chart.sets[i].items.get(j) {
                j += 1;
                if chart.total > MAX_ITEMS {
                    return Err(
                        "the grammar check gave up: the grammar is too ambiguous for this output"
                            .into(),
                    );
                }
                let prod = &self.productions[item.prod];
                match prod.rhs.get(item.dot) {
                    None => {
                        let waiting = chart.sets[item.origin]
                            .waiting
                            .get(&prod.lhs)
                            .cloned()
                            .unwrap_or_default();
                        for k in waiting {
                            let parent = chart.sets[item.origin].items[k];
                            chart.add(i, parent.advance(), &self.productions);
                        }
                    }
                    Some(Sym::Rule(b)) => {
                        for &q in &self.by_lhs[*b] {
                            chart.add(
                                i,
                                Item {
                                    prod: q,
                                    dot: 0,
                                    origin: i,
                                },
                                &self.productions,
                            );
                        }
                        if self.nullable[*b] {
                            chart.add(i, item.advance(), &self.productions);
                        }
                    }
                    Some(Sym::Char(class)) => {
                        if chars.get(i).is_some_and(|&c| class.matches(c)) {
                            chart.add(i + 1, item.advance(), &self.productions);
                        }
                    }
                }
            }
            if i < chars.len() && chart.sets[i + 1].items.is_empty() {
                let (line, column) = line_column(&chars, i);
                return Err(format!(
                    "does not match the grammar at line {line}, column {column}: unexpected {:?}",
                    chars[i]
                ));
            }
        }
        let complete = chart.sets[chars.len()].items.iter().any(|it| {
            it.origin == 0
                && self.productions[it.prod].lhs == self.root
                && it.dot == self.productions[it.prod].rhs.len()
        });
        if complete {
            Ok(())
        } else {
            Err(
                "does not match the grammar: the output ends before the root rule is complete"
                    .into(),
            )
        }
    }
}

fn line_column(chars: &[char], pos: usize) -> (usize, usize) {
    let before = &chars[..pos.min(chars.len())];
    let line = before.iter().filter(|&&c| c == '\n').count() + 1;
    let column = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
    (line, column)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Item {
    prod: usize,
    dot: usize,
    origin: usize,
}

impl Item {
    fn advance(self) -> Self {
        Self {
            dot: self.dot + 1,
            ..self
        }
    }
}

#[derive(Default)]
struct EarleySet {
    items: Vec<Item>,
    seen: std::collections::HashSet<Item>,
    /// Items (by index) whose next symbol is the given rule.
    waiting: HashMap<usize, Vec<usize>>,
}

struct Chart {
    sets: Vec<EarleySet>,
    total: usize,
}

impl Chart {
    fn new(len: usize) -> Self {
        Self {
            sets: (0..=len).map(|_| EarleySet::default()).collect(),
            total: 0,
        }
    }

    fn add(&mut self, at: usize, item: Item, productions: &[Production]) {
        let set = &mut self.sets[at];
        if !set.seen.insert(item) {
            return;
        }
        if let Some(Sym::Rule(b)) = productions[item.prod].rhs.get(item.dot) {
            set.waiting.entry(*b).or_default().push(set.items.len());
        }
        set.items.push(item);
        self.total += 1;
    }
}

/// Recursive-descent parser over the grammar text, following llama.cpp's `grammar-parser`.
struct Parser {
    src: Vec<char>,
    pos: usize,
    names: Vec<String>,
    ids: HashMap<String, usize>,
    defined: Vec<bool>,
    /// Where each rule name was first seen (for "undefined rule" errors).
    first_use: Vec<usize>,
    productions: Vec<Production>,
}

impl Parser {
    fn error(&self, at: usize, message: impl Into<String>) -> GrammarError {
        let (line, column) = line_column(&self.src, at);
        GrammarError {
            line,
            column,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.src.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.src.get(self.pos + offset).copied()
    }

    fn skip_space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n' && c != '\r') {
                        self.pos += 1;
                    }
                }
                '\r' | '\n' if newline_ok => self.pos += 1,
                _ => break,
            }
        }
    }

    fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-' || c == '_'
    }

    fn rule_id(&mut self, name: &str, at: usize) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len();
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        self.defined.push(false);
        self.first_use.push(at);
        id
    }

    fn fresh_rule(&mut self, base: usize) -> usize {
        let name = format!("{}#{}", self.names[base], self.names.len());
        let at = self.pos;
        let id = self.rule_id(&name, at);
        self.defined[id] = true;
        id
    }

    fn parse_grammar(&mut self) -> Result<(), GrammarError> {
        self.skip_space(true);
        while self.peek().is_some() {
            self.parse_rule()?;
        }
        Ok(())
    }

    fn parse_name(&mut self) -> Result<String, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(Self::is_name_char) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error(start, "expected a rule name"));
        }
        Ok(self.src[start..self.pos].iter().collect())
    }

    fn parse_rule(&mut self) -> Result<(), GrammarError> {
        let start = self.pos;
        let name = self.parse_name()?;
        let id = self.rule_id(&name, start);
        if self.defined[id] {
            return Err(self.error(start, format!("rule {name:?} is defined twice")));
        }
        self.defined[id] = true;
        self.skip_space(false);
        if !(self.peek() == Some(':')
            && self.peek_at(1) == Some(':')
            && self.peek_at(2) == Some('='))
        {
            return Err(self.error(self.pos, "expected ::="));
        }
        self.pos += 3;
        self.skip_space(true);
        self.parse_alternates(id, 0)?;
        match self.peek() {
            Some('\r') => {
                self.pos += if self.peek_at(1) == Some('\n') { 2 } else { 1 };
            }
            Some('\n') => self.pos += 1,
            None => {}
            Some(c) => {
                return Err(self.error(
                    self.pos,
                    format!("expected a newline or the end, found {c:?}"),
                ))
            }
        }
        self.skip_space(true);
        Ok(())
    }

    fn parse_alternates(&mut self, lhs: usize, depth: usize) -> Result<(), GrammarError> {
        loop {
            let rhs = self.parse_sequence(lhs, depth)?;
            self.productions.push(Production { lhs, rhs });
            if self.peek() == Some('|') {
                self.pos += 1;
                self.skip_space(true);
            } else {
                return Ok(());
            }
        }
    }

    fn parse_sequence(&mut self, lhs: usize, depth: usize) -> Result<Vec<Sym>, GrammarError> {
        let nested = depth > 0;
        let mut seq: Vec<Sym> = Vec::new();
        // Start of the last element in `seq`: repetition operators apply to it.
        let mut last_start: Option<usize> = None;
        while let Some(c) = self.peek() {
            let element_start = seq.len();
            match c {
                '"' => {
                    self.parse_literal(&mut seq)?;
                    last_start = Some(element_start);
                }
                '[' => {
                    let class = self.parse_class()?;
                    seq.push(Sym::Char(class));
                    last_start = Some(element_start);
                }
                '.' => {
                    self.pos += 1;
                    seq.push(Sym::Char(CharClass {
                        negated: true,
                        ranges: Vec::new(),
                    }));
                    last_start = Some(element_start);
                }
                '(' => {
                    if depth >= MAX_NESTING {
                        return Err(self
                            .error(self.pos, format!("groups nested deeper than {MAX_NESTING}")));
                    }
                    let open = self.pos;
                    self.pos += 1;
                    self.skip_space(true);
                    let group = self.fresh_rule(lhs);
                    self.parse_alternates(group, depth + 1)?;
                    if self.peek() != Some(')') {
                        return Err(self.error(open, "expected ) to close this group"));
                    }
                    self.pos += 1;
                    seq.push(Sym::Rule(group));
                    last_start = Some(element_start);
                }
                '*' | '+' | '?' | '{' => {
                    let Some(from) = last_start.take() else {
                        return Err(self.error(self.pos, format!("{c:?} must follow an element")));
                    };
                    let (min, max) = self.parse_repetition()?;
                    let element: Vec<Sym> = seq.split_off(from);
                    let repeated = self.repeat(lhs, element, min, max);
                    seq.extend(repeated);
                }
                c if Self::is_name_char(c) => {
                    let at = self.pos;
                    let name = self.parse_name()?;
                    seq.push(Sym::Rule(self.rule_id(&name, at)));
                    last_start = Some(element_start);
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        Ok(seq)
    }

    /// Parses a string literal at `"`: each of its characters a symbol of `seq`.
    fn parse_literal(&mut self, seq: &mut Vec<Sym>) -> Result<(), GrammarError> {
        let open = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None | Some('\n') | Some('\r') => {
                    return Err(self.error(open, "unterminated string literal"))
                }
                Some('"') => break,
                _ => seq.push(Sym::Char(CharClass::single(self.parse_char()?))),
            }
        }
        self.pos += 1;
        Ok(())
    }

    /// Parses a character class at `[`: `[a-z]`, negated as `[^...]`.
    fn parse_class(&mut self) -> Result<CharClass, GrammarError> {
        let open = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error(open, "unterminated character class")),
                Some(']') => break,
                _ => {
                    let lo = self.parse_char()?;
                    let hi =
                        if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                            self.pos += 1;
                            self.parse_char()?
                        } else {
                            lo
                        };
                    if hi < lo {
                        return Err(self.error(self.pos, format!("empty range {lo:?}-{hi:?}")));
                    }
                    ranges.push((lo, hi));
                }
            }
        }
        self.pos += 1;
        Ok(CharClass { negated, ranges })
    }

    /// Parses `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`; `None` as max means unbounded.
    fn parse_repetition(&mut self) -> Result<(u32, Option<u32>), GrammarError> {
        let c = self.peek();
        self.pos += 1;
        match c {
            Some('*') => Ok((0, None)),
            Some('+') => Ok((1, None)),
            Some('?') => Ok((0, Some(1))),
            _ => {
                let open = self.pos - 1;
                self.skip_space(true);
                let min = self.parse_number(open)?;
                self.skip_space(true);
                let max = if self.peek() == Some(',') {
                    self.pos += 1;
                    self.skip_space(true);
                    if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        Some(self.parse_number(open)?)
                    } else {
                        None
                    }
                } else {
                    Some(min)
                };
                self.skip_space(true);
                if self.peek() != Some('}') {
                    return Err(self.error(open, "expected } to close this repetition"));
                }
                self.pos += 1;
                if max.is_some_and(|max| max < min) {
                    return Err(self.error(open, "repetition maximum is below its minimum"));
                }
                Ok((min, max))
            }
        }
    }

    fn parse_number(&mut self, open: usize) -> Result<u32, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let digits: String = self.src[start..self.pos].iter().collect();
        match digits.parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(n),
            Ok(_) | Err(_) if !digits.is_empty() => Err(self.error(
                open,
                format!("repetition bound {digits} is above {MAX_REPEAT}"),
            )),
            _ => Err(self.error(start, "expected a number in the repetition")),
        }
    }

    /// `element{min,max}` as symbols: `min` copies, then `element*` (left-recursive, which Earley
    /// handles in linear time) or `max - min` nested optionals.
    fn repeat(&mut self, lhs: usize, element: Vec<Sym>, min: u32, max: Option<u32>) -> Vec<Sym> {
        let mut out = Vec::new();
        for _ in 0..min {
            out.extend(element.iter().cloned());
        }
        match max {
            None => {
                let star = self.fresh_rule(lhs);
                let mut rhs = vec![Sym::Rule(star)];
                rhs.extend(element);
                self.productions.push(Production { lhs: star, rhs });
                self.productions.push(Production {
                    lhs: star,
                    rhs: Vec::new(),
                });
                out.push(Sym::Rule(star));
            }
            Some(max) if max > min => {
                // opt_k ::= element opt_{k-1} | ε, built innermost first.
                let mut inner: Option<usize> = None;
                for _ in min..max {
                    let opt = self.fresh_rule(lhs);
                    let mut rhs = element.clone();
                    rhs.extend(inner.map(Sym::Rule));
                    self.productions.push(Production { lhs: opt, rhs });
                    self.productions.push(Production {
                        lhs: opt,
                        rhs: Vec::new(),
                    });
                    inner = Some(opt);
                }
                out.extend(inner.map(Sym::Rule));
            }
            Some(_) => {}
        }
        out
    }

    fn parse_char(&mut self) -> Result<char, GrammarError> {
        let at = self.pos;
        let Some(c) = self.peek() else {
            return Err(self.error(at, "unexpected end of grammar"));
        };
        self.pos += 1;
        if c != '\\' {
            return Ok(c);
        }
        let Some(e) = self.peek() else {
            return Err(self.error(at, "unexpected end of grammar after \\"));
        };
        self.pos += 1;
        let hex_digits = match e {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            'n' => return Ok('\n'),
            'r' => return Ok('\r'),
            't' => return Ok('\t'),
            '\\' | '"' | '[' | ']' | '-' | '^' => return Ok(e),
            _ => return Err(self.error(at, format!("unknown escape \\{e}"))),
        };
        let start = self.pos;
        let end = start + hex_digits;
        let digits: String = self
            .src
            .get(start..end)
            .map(|s| s.iter().collect())
            .unwrap_or_default();
        let value = u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| digits.len() == hex_digits)
            .and_then(char::from_u32)
            .ok_or_else(|| {
                self.error(
                    at,
                    format!("\\{e} needs {hex_digits} hex digits of a valid character"),
                )
            })?;
        self.pos = end;
        Ok(value)
    }

    fn finish(self) -> Result<Grammar, GrammarError> {
        for (id, defined) in self.defined.iter().enumerate() {
            if !defined {
                return Err(self.error(
                    self.first_use[id],
                    format!("rule {:?} is used but not defined", self.names[id]),
                ));
            }
        }
        let root = *self
            .ids
            .get("root")
            .ok_or_else(|| self.error(0, "the grammar has no root rule"))?;
        let mut by_lhs = vec![Vec::new(); self.names.len()];
        for (p, prod) in self.productions.iter().enumerate() {
            by_lhs[prod.lhs].push(p);
        }
        let mut nullable = vec![false; self.names.len()];
        let mut changed = true;
        while changed {
            changed = false;
            for prod in &self.productions {
                if !nullable[prod.lhs]
                    && prod
                        .rhs
                        .iter()
                        .all(|s| matches!(s, Sym::Rule(r) if nullable[*r]))
                {
                    nullable[prod.lhs] = true;
                    changed = true;
                }
            }
        }
        Ok(Grammar {
            productions: self.productions,
            by_lhs,
            nullable,
            root,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(grammar: &str, text: &str) -> bool {
        Grammar::parse(grammar)
            .expect("grammar parses")
            .check(text)
            .is_ok()
    }

    #[test]
    fn literals_classes_and_alternatives() {
        let g = r#"root ::= "yes" | "no" | [0-9]+"#;
        assert!(ok(g, "yes"));
        assert!(ok(g, "no"));
        assert!(ok(g, "2024"));
        assert!(!ok(g, "maybe"));
        assert!(!ok(g, "yes "));
        assert!(!ok(g, ""));
    }

    #[test]
    fn groups_repetitions_and_multiline_rules() {
        let g = r#"
# a list of shots
root ::= "[" ws ( shot ( "," ws shot ){2} ) ws "]"
shot ::=
  "{" [a-z ]{1,12} "}"
ws ::= [ \t\n]*
"#;
        assert!(ok(g, "[{a b},{c},{dd}]"));
        assert!(ok(g, "[ {a},\n {b}, {c} ]"));
        assert!(!ok(g, "[{a},{b}]"));
        assert!(!ok(g, "[{a},{b},{c},{d}]"));
        assert!(!ok(g, "[{abcdefghijklm},{b},{c}]"));
    }

    #[test]
    fn negation_any_and_escapes() {
        let g = r#"root ::= "\"" [^"\\\n]* "\"" "\x21"? . "\u00e9""#;
        assert!(ok(g, "\"hi there\"!xé"));
        assert!(ok(g, "\"\"zé"));
        assert!(!ok(g, "\"a\"b\"zé"));
    }

    #[test]
    fn nullable_rules_and_left_recursion() {
        let g = "root ::= a b \"x\"\na ::= \"\" | \"a\"\nb ::= b \"b\" | ";
        assert!(ok(g, "x"));
        assert!(ok(g, "abbbx"));
        assert!(!ok(g, "aax"));
    }

    #[test]
    fn mismatch_reports_position() {
        let g = Grammar::parse(r#"root ::= "ab\ncd""#).unwrap();
        assert_eq!(
            g.check("ab\ncx").unwrap_err(),
            "does not match the grammar at line 2, column 2: unexpected 'x'"
        );
        assert!(g
            .check("ab\nc")
            .unwrap_err()
            .contains("ends before the root rule is complete"));
    }

    #[test]
    fn bad_grammars_are_reported_with_position() {
        let err = |g: &str| Grammar::parse(g).unwrap_err().to_string();
        assert_eq!(
            err("root ::= item"),
            "line 1, column 10: rule \"item\" is used but not defined"
        );
        assert_eq!(
            err("start ::= \"a\""),
            "line 1, column 1: the grammar has no root rule"
        );
        assert!(err("root ::= \"a").contains("unterminated string literal"));
        assert!(err("root ::= ( \"a\"").contains("expected ) to close this group"));
        assert!(err("root ::= * \"a\"").contains("must follow an element"));
        assert!(err("root ::= \"a\"{3,1}").contains("below its minimum"));
        assert!(err("root ::= \"\\q\"").contains("unknown escape"));
        assert!(err("root ::= \"a\"\nroot ::= \"b\"").contains("defined twice"));
        assert!(err(&format!(
            "root ::= {}\"a\"{}",
            "(".repeat(100),
            ")".repeat(100)
        ))
        .contains("nested deeper"));
    }
}
