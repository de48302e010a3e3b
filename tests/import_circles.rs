//! Import circles between the files of `src/`: read as a graph whose arrows run from a file to
//! every file it takes a name from, no two files may reach each other beyond the circles listed
//! in `KNOWN`, a list that only shrinks.
//!
//! An arrow is any path in code that names an item of another file: a `use` (groups and renames
//! expanded), a path in an expression, a type or an attribute (`crate::…`, `super::…`,
//! `self::…`, a child module's name, or a name a `use` brought in for a module), and a name the
//! file mentions that a glob `use` (`use super::*;`, or a `mod.rs`'s own `pub use child::*;`)
//! brings in. It runs to the file that defines the item, through any `pub use` on the way, named
//! or glob, as Rust resolves it: a `use super::*` in `a/x.rs` takes the items `a/mod.rs`
//! defines or imports and, through its `pub use y::*`, the public items of `a/y.rs`, so `x.rs`
//! naming one of those has an arrow to `y.rs`. A `mod.rs` that only re-exports ties nothing; a
//! child that takes an item its parent defines, while the parent uses the child, is a circle.
//! A name a file defines, imports by name or binds itself (`let name`, `name: …`) is its own,
//! not the glob's (a bound name still counts where it is called: `name(…)`). `#[cfg(test)]`
//! items, test-only files and comments are not read.
//!
//! The same arrows between rooms ([`room`]: a folder two levels below `src` or deeper, such as a
//! gate's folder, or a file beside such folders) may not loop either: no two rooms reach each
//! other.
//!
//! Run alone with `cargo test --test import_circles -- --nocapture` (it prints the circles that
//! still stand, listed in `KNOWN`); a failure lists each new circle with the names
//! that tie each arrow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path of a file, `[]` for the crate root.
type Module = Vec<String>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
    /// A character, number, byte or raw string literal.
    Literal,
    /// A string literal, reduced to the names it would capture as a format string (`{name}`,
    /// `{name:?}`).
    Str(Vec<String>),
}

/// The tokens of Rust source without comments, with literals reduced to [`Token::Literal`] and
/// [`Token::Str`].
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            let end = skip_string(&chars, i + 1);
            let body: String = chars[i + 1..end.saturating_sub(1).max(i + 1)]
                .iter()
                .collect();
            out.push(Token::Str(captured_names(&body)));
            i = end;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(Token::Literal);
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push(Token::Literal);
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Literal);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && matches!(chars.get(i), Some('"') | Some('#')) {
                let mut hashes = 0;
                while chars.get(i) == Some(&'#') {
                    hashes += 1;
                    i += 1;
                }
                if chars.get(i) == Some(&'"') {
                    i += 1;
                    loop {
                        if i >= chars.len() {
                            break;
                        }
                        if chars[i] == '"' && (1..=hashes).all(|h| chars.get(i + h) == Some(&'#')) {
                            i += 1 + hashes;
                            break;
                        }
                        i += 1;
                    }
                    out.push(Token::Literal);
                    continue;
                }
            }
            if matches!(word.as_str(), "b" | "c") && chars.get(i) == Some(&'"') {
                i = skip_string(&chars, i + 1);
                out.push(Token::Literal);
                continue;
            }
            if word == "b" && chars.get(i) == Some(&'\'') {
                i += 1;
                if chars.get(i) == Some(&'\\') {
                    i += 1;
                }
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(Token::Literal);
                continue;
            }
            out.push(Token::Ident(word));
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// The names the body of a string literal captures if it is a format string: `{name}` and
/// `{name:…}`, not `{{`, positions (`{0}`) or empty braces.
fn captured_names(body: &str) -> Vec<String> {
    let chars: Vec<char> = body.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '{' {
            i += 1;
            continue;
        }
        if chars.get(i + 1) == Some(&'{') {
            i += 2;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
            end += 1;
        }
        let name: String = chars[start..end].iter().collect();
        let closed = matches!(chars.get(end), Some('}' | ':'));
        if closed
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
        {
            out.push(name);
        }
        i = end.max(i + 1);
    }
    out
}

/// The index after the closing quote of a string whose body starts at `i`.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index after the item that starts at `i` (an attribute's target): up to a `;` outside any
/// bracket, or the end of its first top-level `{ … }` block (a `use` always ends at its `;`).
fn skip_item(t: &[Token], mut i: usize) -> usize {
    let is_use = t.get(i) == Some(&Token::Ident("use".into()))
        || (t.get(i) == Some(&Token::Ident("pub".into()))
            && t.get(i + 1) == Some(&Token::Ident("use".into())));
    let mut depth = 0i32;
    while i < t.len() {
        match &t[i] {
            Token::Punct('(' | '[') => depth += 1,
            Token::Punct(')' | ']') => depth -= 1,
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 && !is_use {
                    return i + 1;
                }
            }
            Token::Punct(';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index after the bracket group that opens at `i` (`[`, `(` or `{`).
fn skip_group(t: &[Token], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match t[i] {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Expands a `use` tree starting at `i` into full paths (`self` in a group names the group's
/// prefix); returns the paths with their local names, and the index after the tree.
fn use_tree(t: &[Token], mut i: usize, prefix: &[String]) -> (Vec<(Vec<String>, String)>, usize) {
    let mut path = prefix.to_vec();
    let mut out = Vec::new();
    loop {
        match t.get(i) {
            Some(Token::Ident(word)) => {
                if word == "self" && !path.is_empty() && i > 0 && t[i - 1] != Token::PathSep {
                    // `self` inside a group: the prefix itself.
                } else {
                    path.push(word.clone());
                }
                i += 1;
                if t.get(i) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                let mut local = path.last().cloned().unwrap_or_default();
                if t.get(i) == Some(&Token::Ident("as".into())) {
                    if let Some(Token::Ident(alias)) = t.get(i + 1) {
                        local = alias.clone();
                    }
                    i += 2;
                }
                out.push((path, local));
                return (out, i);
            }
            Some(Token::Punct('*')) => {
                out.push((path, String::new()));
                return (out, i + 1);
            }
            Some(Token::Punct('{')) => {
                i += 1;
                loop {
                    match t.get(i) {
                        Some(Token::Punct('}')) => return (out, i + 1),
                        Some(Token::Punct(',')) => i += 1,
                        None => return (out, i),
                        _ => {
                            let (more, after) = use_tree(t, i, &path);
                            out.extend(more);
                            i = after;
                        }
                    }
                }
            }
            Some(Token::PathSep) => i += 1,
            _ => return (out, i),
        }
    }
}

/// One file: its module, its tokens and the child modules it declares (`mod name;`).
struct File {
    path: PathBuf,
    module: Module,
    tokens: Vec<Token>,
}

/// Whether `t[i..]` is `# [ cfg ( test ) ]`.
fn cfg_test_at(t: &[Token], i: usize) -> bool {
    let want = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".into()),
        Token::Punct('('),
        Token::Ident("test".into()),
        Token::Punct(')'),
        Token::Punct(']'),
    ];
    t.len() >= i + want.len() && t[i..i + want.len()] == want
}

/// The tokens without `#[cfg(test)]` items (the attribute and the item after it, with any
/// further attributes between them).
fn without_test_items(t: Vec<Token>) -> Vec<Token> {
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        if cfg_test_at(&t, i) {
            i += 7;
            while t.get(i) == Some(&Token::Punct('#')) {
                i = skip_group(&t, i + 1);
            }
            i = skip_item(&t, i);
        } else {
            out.push(t[i].clone());
            i += 1;
        }
    }
    out
}

/// The module a file under `src/` defines: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`.
fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().map(String::as_str) == Some("mod") || parts == ["lib"] {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The library's files, from `src/lib.rs` through every `mod name;` that is not `#[cfg(test)]`.
fn library(src: &Path) -> Vec<File> {
    let mut all = Vec::new();
    rust_files(src, &mut all);
    let mut by_module: BTreeMap<Module, File> = BTreeMap::new();
    for path in all {
        let rel = path.strip_prefix(src).expect("under src").to_path_buf();
        if rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        by_module.insert(
            module_of(&rel),
            File {
                path: Path::new("src").join(&rel),
                module: module_of(&rel),
                tokens: without_test_items(tokens(&text)),
            },
        );
    }
    // Keep what lib.rs reaches by declarations outside test items.
    let mut reached = BTreeSet::new();
    let mut todo = vec![Module::new()];
    while let Some(module) = todo.pop() {
        if !reached.insert(module.clone()) {
            continue;
        }
        let Some(file) = by_module.get(&module) else {
            continue;
        };
        let t = &file.tokens;
        for i in 0..t.len().saturating_sub(2) {
            if let (Token::Ident(m), Token::Ident(name), Token::Punct(';')) =
                (&t[i], &t[i + 1], &t[i + 2])
            {
                if m == "mod" {
                    let mut child = module.clone();
                    child.push(name.clone());
                    todo.push(child);
                }
            }
        }
    }
    by_module
        .into_values()
        .filter(|f| reached.contains(&f.module))
        .collect()
}

/// `path` made absolute from inside `current`: `crate::`, `self::`, `super::` or a child module's
/// name; `None` for other paths (extern crates, local names).
fn absolute(modules: &BTreeSet<Module>, current: &Module, path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    let (mut base, rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (current.clone(), &path[1..]),
        "super" => {
            let mut base = current.clone();
            let mut rest = path;
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
            (base, rest)
        }
        _ => {
            let mut child = current.clone();
            child.push(first.clone());
            if !modules.contains(&child) {
                return None;
            }
            (current.clone(), path)
        }
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

/// What a file offers by name: the items it defines and the names it brings in with `use`.
#[derive(Default)]
struct Offer {
    /// Items defined outside any block.
    defined: BTreeSet<String>,
    /// The defined items declared `pub` in any form (`pub`, `pub(crate)`, `pub(super)`, …): the
    /// ones a glob passes on to a module that is not inside this one.
    public: BTreeSet<String>,
    /// `pub use a::b as c;`: `c` -> `a::b`, absolute.
    reexported: BTreeMap<String, Vec<String>>,
    /// `use a::b as c;` without `pub`: seen only inside the module (a child's `use super::*`
    /// takes them).
    imported: BTreeMap<String, Vec<String>>,
    /// `pub use a::*;`: absolute module paths.
    globs: Vec<Vec<String>>,
    /// `use a::*;` without `pub`: seen only inside the module, as `imported`.
    private_globs: Vec<Vec<String>>,
}

/// Whether the token before `i` closes a `pub` visibility (`pub`, `pub(crate)`, …).
fn is_pub_at(t: &[Token], i: usize) -> bool {
    let before = |n: usize| i.checked_sub(n).and_then(|at| t.get(at));
    before(1) == Some(&Token::Ident("pub".into()))
        || (before(1) == Some(&Token::Punct(')'))
            && (2..6).any(|n| before(n) == Some(&Token::Ident("pub".into()))))
}

/// Whether the item whose keyword is at `i` is `pub`, past qualifiers (`pub const fn`,
/// `pub(crate) async fn`, `pub extern "C" fn`).
fn is_pub_item(t: &[Token], mut i: usize) -> bool {
    while i > 0
        && match &t[i - 1] {
            Token::Ident(w) => matches!(w.as_str(), "const" | "async" | "unsafe" | "extern"),
            Token::Literal | Token::Str(_) => true,
            _ => false,
        }
    {
        i -= 1;
    }
    is_pub_at(t, i)
}

/// The items each file defines outside any block, and what it brings in with `use`.
fn offers(files: &[File], modules: &BTreeSet<Module>) -> BTreeMap<Module, Offer> {
    let mut out = BTreeMap::new();
    for file in files {
        let t = &file.tokens;
        let mut offer = Offer::default();
        let mut depth = 0;
        for i in 0..t.len() {
            match &t[i] {
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => depth -= 1,
                Token::Ident(word) if depth == 0 => {
                    let keyword = matches!(
                        word.as_str(),
                        "fn" | "struct"
                            | "enum"
                            | "const"
                            | "static"
                            | "type"
                            | "trait"
                            | "union"
                            | "macro_rules"
                    );
                    let name = match (t.get(i + 1), t.get(i + 2)) {
                        (Some(Token::Punct('!')), Some(Token::Ident(n))) => Some(n),
                        (Some(Token::Ident(n)), _) => Some(n),
                        _ => None,
                    };
                    if let (true, Some(name)) = (keyword, name) {
                        offer.defined.insert(name.clone());
                        if is_pub_item(t, i) {
                            offer.public.insert(name.clone());
                        }
                    }
                    if word == "use" {
                        let public = is_pub_at(t, i);
                        for (path, local) in use_tree(t, i + 1, &[]).0 {
                            let Some(abs) = absolute(modules, &file.module, &path) else {
                                continue;
                            };
                            match (local.is_empty(), public) {
                                (true, true) => offer.globs.push(abs),
                                (true, false) => offer.private_globs.push(abs),
                                (false, true) => {
                                    offer.reexported.insert(local, abs);
                                }
                                (false, false) => {
                                    offer.imported.insert(local, abs);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        out.insert(file.module.clone(), offer);
    }
    out
}

/// The library as one namespace: its modules, the file of each and what each offers.
struct Library<'a> {
    modules: BTreeSet<Module>,
    paths: BTreeMap<Module, &'a PathBuf>,
    offers: BTreeMap<Module, Offer>,
}

impl<'a> Library<'a> {
    fn new(files: &'a [File]) -> Self {
        let modules: BTreeSet<Module> = files.iter().map(|f| f.module.clone()).collect();
        let offers = offers(files, &modules);
        Library {
            paths: files.iter().map(|f| (f.module.clone(), &f.path)).collect(),
            modules,
            offers,
        }
    }

    /// The longest prefix of `path` that is a module, and whether it is all of `path`.
    fn module_of_path(&self, path: &[String]) -> Option<(Module, bool)> {
        (0..=path.len()).rev().find_map(|n| {
            let prefix = path[..n].to_vec();
            self.modules
                .contains(&prefix)
                .then_some((prefix, n == path.len()))
        })
    }

    /// The file that defines what the absolute `path` names, as code in module `viewer` sees it,
    /// following re-exports (named and glob); the file of the longest module prefix when the
    /// name is not found.
    fn defining(&self, path: &[String], viewer: &Module, hops: usize) -> Option<&'a PathBuf> {
        let (module, whole) = self.module_of_path(path)?;
        let here = self.paths.get(&module).copied();
        if whole {
            // A path that ends at a module names an item of its parent of the same name
            // (`fn revision` beside `mod revision`): a module alone is never used by a path.
            let parent = &module[..module.len().saturating_sub(1)];
            let item = self
                .offers
                .get(parent)
                .is_some_and(|o| module.last().is_some_and(|n| o.defined.contains(n)));
            return if item {
                self.paths.get(parent).copied()
            } else {
                here
            };
        }
        let name = &path[module.len()];
        let rest = &path[module.len() + 1..];
        self.offered(&module, name, rest, viewer, hops).or(here)
    }

    /// The file that defines `name` (followed by `rest`) as module `module` offers it to code in
    /// module `viewer`: an item it defines (a private one only to itself and its descendants), a
    /// name it re-exports or imports (an import likewise), a path through a child module, else the
    /// first of its globs (private ones likewise) that offers the name to `module`, recursively.
    /// `None` when `module` does not offer `name` to `viewer`.
    fn offered(
        &self,
        module: &Module,
        name: &str,
        rest: &[String],
        viewer: &Module,
        hops: usize,
    ) -> Option<&'a PathBuf> {
        if hops > 8 {
            return None;
        }
        let offer = self.offers.get(module)?;
        let inside = viewer.starts_with(module);
        if offer.defined.contains(name) {
            return (inside || offer.public.contains(name))
                .then(|| self.paths.get(module).copied())
                .flatten();
        }
        let named = offer
            .reexported
            .get(name)
            .or_else(|| inside.then(|| offer.imported.get(name)).flatten());
        // What a `use` brings in is what the module that holds it sees.
        if let Some(target) = named {
            let mut next = target.clone();
            next.extend(rest.iter().cloned());
            return self.defining(&next, module, hops + 1);
        }
        // A child module is used only by a path through it.
        let mut child = module.clone();
        child.push(name.to_string());
        if self.modules.contains(&child) {
            return (!rest.is_empty())
                .then(|| {
                    child.extend(rest.iter().cloned());
                    self.defining(&child, module, hops + 1)
                })
                .flatten();
        }
        let private: &[Vec<String>] = if inside { &offer.private_globs } else { &[] };
        offer
            .globs
            .iter()
            .chain(private)
            .find_map(|glob| self.offered(glob, name, rest, module, hops + 1))
    }
}

/// Keywords after which an identifier is being defined or bound, not used.
const BINDERS: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "trait",
    "type",
    "const",
    "static",
    "mod",
    "let",
    "mut",
    "ref",
    "for",
    "union",
    "macro_rules",
];

/// The paths in `t` that may start with a name brought in by a glob: an identifier outside any
/// `use`, not after `.` or `::` (a field, a method, a later segment), not before a lone `:` (a
/// field or binding being named), not after a keyword that defines or binds it, with the `::`
/// segments after it; and the names a string captures as a format string (`"{NAME}"`). A name
/// the file also binds (`let name`, `name: …`, `for name`) counts only where it is called or a
/// path goes through it (`name(`, `name!`, `name::`): elsewhere it is the local. Names in
/// `shadowed` (defined by the file or imported by name) are left out: they take precedence over
/// glob imports.
fn glob_candidates(t: &[Token], shadowed: &BTreeSet<String>) -> BTreeSet<Vec<String>> {
    let binds = |i: usize| {
        let previous = i.checked_sub(1).map(|p| &t[p]);
        matches!(previous, Some(Token::Ident(w)) if BINDERS.contains(&w.as_str()))
            || t.get(i + 1) == Some(&Token::Punct(':'))
    };
    let bound: BTreeSet<&str> = (0..t.len())
        .filter(|&i| binds(i))
        .filter_map(|i| match &t[i] {
            Token::Ident(w) => Some(w.as_str()),
            _ => None,
        })
        .collect();
    let mut out = BTreeSet::new();
    let mut next = 0;
    while next < t.len() {
        let i = next;
        next += 1;
        if let Token::Str(names) = &t[i] {
            // A format string's captured names are locals where the file binds them.
            let names = names
                .iter()
                .filter(|n| !shadowed.contains(n.as_str()) && !bound.contains(n.as_str()));
            out.extend(names.map(|n| vec![n.clone()]));
            continue;
        }
        let Token::Ident(word) = &t[i] else { continue };
        if word == "use" {
            // The paths of a `use` are resolved as such, not as names in code.
            next = use_tree(t, i + 1, &[]).1;
            continue;
        }
        let called = matches!(t.get(i + 1), Some(Token::Punct('(' | '!') | Token::PathSep));
        if binds(i)
            || matches!(
                i.checked_sub(1).map(|p| &t[p]),
                Some(Token::Punct('.') | Token::PathSep)
            )
            || shadowed.contains(word)
            || (bound.contains(word.as_str()) && !called)
        {
            continue;
        }
        let mut path = vec![word.clone()];
        let mut j = i + 1;
        while let (Some(Token::PathSep), Some(Token::Ident(segment))) = (t.get(j), t.get(j + 1)) {
            path.push(segment.clone());
            j += 2;
        }
        out.insert(path);
    }
    out
}

/// The arrows from one file: the file each name it takes comes from, with the paths that name
/// it. A name taken through a re-export or a glob is an arrow to the file that defines it.
fn file_arrows<'a>(file: &File, lib: &Library<'a>) -> BTreeMap<&'a PathBuf, BTreeSet<String>> {
    let t = &file.tokens;
    let idents: BTreeMap<&str, usize> = t.iter().fold(BTreeMap::new(), |mut m, tok| {
        if let Token::Ident(w) = tok {
            *m.entry(w.as_str()).or_insert(0) += 1;
        }
        m
    });
    // `current` for `self`/`super`: the file's module plus the inline modules around `i`.
    let mut inline: Vec<(String, i32)> = Vec::new();
    let mut depth = 0i32;
    // Names a `use` bound to a module (`use super::build;`), resolved when a path starts so.
    let mut module_aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Names a `use` bound by name (they shadow glob imports), and the modules of its globs.
    let mut named: BTreeSet<String> = BTreeSet::new();
    let mut globs: Vec<(Vec<String>, Module)> = Vec::new();
    let mut found: Vec<(Vec<String>, Module)> = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let mut current = file.module.clone();
        current.extend(inline.iter().map(|(m, _)| m.clone()));
        match &t[i] {
            Token::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) =
                    (t.get(i + 1), t.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                    depth += 1;
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Token::Ident(word) if word == "use" => {
                let public = is_pub_at(t, i);
                let (used, after) = use_tree(t, i + 1, &[]);
                for (path, local) in used {
                    if !local.is_empty() {
                        named.insert(local.clone());
                    }
                    let Some(abs) = absolute(&lib.modules, &current, &path) else {
                        continue;
                    };
                    match lib.module_of_path(&abs) {
                        // A module brought in by name: the paths that start with it count.
                        Some((_, true)) if !local.is_empty() => {
                            module_aliases.insert(local, abs);
                        }
                        // A glob (`pub` or not): the names of it the file mentions count.
                        Some((module, true)) => globs.push((module, current.clone())),
                        // A re-export counts only where the file itself uses the name.
                        Some(_)
                            if public && idents.get(local.as_str()).copied().unwrap_or(0) <= 1 => {}
                        Some(_) => found.push((abs, current.clone())),
                        None => {}
                    }
                }
                i = after;
            }
            Token::Ident(_) => {
                let mut path = Vec::new();
                let mut j = i;
                while let Some(Token::Ident(word)) = t.get(j) {
                    path.push(word.clone());
                    if t.get(j + 1) != Some(&Token::PathSep) {
                        break;
                    }
                    j += 2;
                }
                let previous_is_sep = i > 0 && t[i - 1] == Token::PathSep;
                if path.len() > 1 && !previous_is_sep {
                    let abs = match module_aliases.get(&path[0]) {
                        Some(module) => {
                            let mut abs = module.clone();
                            abs.extend(path[1..].iter().cloned());
                            Some(abs)
                        }
                        None => absolute(&lib.modules, &current, &path),
                    };
                    found.extend(abs.map(|abs| (abs, current.clone())));
                }
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    let mut out: BTreeMap<&'a PathBuf, BTreeSet<String>> = BTreeMap::new();
    for (abs, viewer) in found {
        if let Some(to) = lib.defining(&abs, &viewer, 0) {
            out.entry(to).or_default().insert(abs.join("::"));
        }
    }
    // Names through globs: the file's own items and names it imports by name shadow them.
    if !globs.is_empty() {
        let mut shadowed = named;
        if let Some(offer) = lib.offers.get(&file.module) {
            shadowed.extend(offer.defined.iter().cloned());
        }
        for path in glob_candidates(t, &shadowed) {
            let through = globs.iter().find_map(|(glob, viewer)| {
                let to = lib.offered(glob, &path[0], &path[1..], viewer, 0)?;
                Some((glob, to))
            });
            if let Some((glob, to)) = through {
                let mut abs = glob.clone();
                abs.extend(path.iter().cloned());
                out.entry(to).or_default().insert(abs.join("::"));
            }
        }
    }
    out.remove(&file.path);
    out
}

/// Arrows of the library: `(from, to) -> the paths that make it`.
fn arrows(files: &[File]) -> BTreeMap<(PathBuf, PathBuf), BTreeSet<String>> {
    let lib = Library::new(files);
    let mut arrows = BTreeMap::new();
    for file in files {
        for (to, names) in file_arrows(file, &lib) {
            arrows.insert((file.path.clone(), to.clone()), names);
        }
    }
    arrows
}

/// The strongly connected components with more than one file (Tarjan's algorithm).
fn circles(nodes: &[PathBuf], edges: &BTreeMap<&PathBuf, Vec<&PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(
        v: &'a PathBuf,
        edges: &BTreeMap<&'a PathBuf, Vec<&'a PathBuf>>,
        s: &mut State<'a>,
    ) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, edges, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(v, edges, &mut s);
        }
    }
    s.out
}

/// Each circle of the files under `src`: its files, and the arrows inside it as text.
fn report(src: &Path) -> (usize, Vec<(Vec<String>, String)>) {
    let files = library(src);
    let arrows = arrows(&files);
    let nodes: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
    let mut edges: BTreeMap<&PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for (from, to) in arrows.keys() {
        edges.entry(from).or_default().push(to);
    }
    let found = circles(&nodes, &edges)
        .into_iter()
        .map(|circle| {
            let mut text = format!("{} files:", circle.len());
            for ((from, to), names) in &arrows {
                if circle.contains(from) && circle.contains(to) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    text += &format!(
                        "\n  {} -> {}: {}",
                        from.display(),
                        to.display(),
                        names.join(", ")
                    );
                }
            }
            let members = circle.iter().map(|p| p.display().to_string()).collect();
            (members, text)
        })
        .collect();
    (files.len(), found)
}

/// Circles that stand today, each with its files exactly. A circle not listed here (a new one,
/// or one of these grown by a file) fails the test, and so does an entry that no longer stands:
/// the list only shrinks. It is empty: `src/` has no import circle.
const KNOWN: &[&[&str]] = &[];

#[test]
fn the_library_has_no_import_circle_beyond_the_known_ones() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let (files, found) = report(&src);
    assert!(files > 50, "read only {files} files under src/");
    let known: Vec<Vec<String>> = KNOWN
        .iter()
        .map(|c| c.iter().map(|f| f.to_string()).collect())
        .collect();
    let new: Vec<&str> = found
        .iter()
        .filter(|(members, _)| !known.contains(members))
        .map(|(_, text)| text.as_str())
        .collect();
    let gone: Vec<&Vec<String>> = known
        .iter()
        .filter(|k| !found.iter().any(|(members, _)| members == *k))
        .collect();
    for (_, text) in &found {
        println!("known import circle: {text}");
    }
    assert!(
        new.is_empty(),
        "{} import circle(s) in src/ beyond the known ones (an arrow A -> B: A takes a name B \
         defines):\n{}",
        new.len(),
        new.join("\n")
    );
    assert!(
        gone.is_empty(),
        "these circles no longer stand: delete them from KNOWN in tests/import_circles.rs: {gone:?}"
    );
}

/// The room a file belongs to: a folder two levels below `src` or deeper is one room (every gate
/// of `src/controller/gates/`, `src/controller/build/`), and so is every file beside such
/// folders (`src/controller/observe.rs`, `src/controller/gates/jobs.rs`).
fn room(path: &Path) -> String {
    let parts: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.len() {
        0..=3 => parts.join("/"),
        4 if parts[2] == "gates" => parts.join("/"),
        4 => format!("{}/", parts[..3].join("/")),
        _ => format!("{}/", parts[..4].join("/")),
    }
}

/// Loops between rooms ([`room`]): each loop's rooms, and the arrows between them as text.
fn room_report(src: &Path) -> Vec<(Vec<String>, String)> {
    let files = library(src);
    let arrows = arrows(&files);
    let mut between: BTreeMap<(PathBuf, PathBuf), Vec<String>> = BTreeMap::new();
    for ((from, to), names) in &arrows {
        let (a, b) = (room(from), room(to));
        if a != b {
            let entry = between.entry((a.into(), b.into())).or_default();
            entry.push(format!(
                "{} -> {}: {}",
                from.display(),
                to.display(),
                names.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let nodes: Vec<PathBuf> = files
        .iter()
        .map(|f| PathBuf::from(room(&f.path)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut edges: BTreeMap<&PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for (from, to) in between.keys() {
        edges.entry(from).or_default().push(to);
    }
    circles(&nodes, &edges)
        .into_iter()
        .map(|rooms| {
            let mut text = format!("{} rooms:", rooms.len());
            for ((from, to), lines) in &between {
                if rooms.contains(from) && rooms.contains(to) {
                    for line in lines {
                        text += &format!("\n  {line}");
                    }
                }
            }
            (
                rooms.iter().map(|p| p.display().to_string()).collect(),
                text,
            )
        })
        .collect()
}

/// No two rooms reach each other: a gate's folder, the shared builders and the files of the
/// controller import one way only.
#[test]
fn no_two_rooms_of_the_library_reach_each_other() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = room_report(&src);
    let text: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
    assert!(
        found.is_empty(),
        "{} loop(s) between rooms of src/ (an arrow A -> B: A takes a name B defines):\n{}",
        found.len(),
        text.join("\n")
    );
}

/// The room check itself: two folders whose files import each other's names are one loop, even
/// when no two files are a circle.
#[test]
fn two_rooms_that_reach_each_other_are_a_loop() {
    let dir = std::env::temp_dir().join(format!("import-rooms-{}", std::process::id()));
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod c;\n");
    write("c/mod.rs", "pub mod gates;\npub mod observe;\n");
    write(
        "c/observe.rs",
        "pub struct Observed;\npub fn finished() {}\n",
    );
    write("c/gates/mod.rs", "pub mod a;\n");
    write(
        "c/gates/a/mod.rs",
        "pub mod keep;\npub fn plan(_: crate::c::observe::Observed) {}\n",
    );
    write("c/gates/a/keep.rs", "pub fn old() -> bool { true }\n");
    assert!(room_report(&dir).is_empty());
    write(
        "c/observe.rs",
        "pub struct Observed;\npub fn finished() -> bool { crate::c::gates::a::keep::old() }\n",
    );
    let found = room_report(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].0,
        ["src/c/gates/a/", "src/c/observe.rs"],
        "{}",
        found[0].1
    );
    assert!(
        found[0]
            .1
            .contains("src/c/observe.rs -> src/c/gates/a/keep.rs: c::gates::a::keep::old"),
        "{}",
        found[0].1
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The reader itself: a circle through an item the parent defines, and none through re-exports.
#[test]
fn a_child_taking_an_item_of_the_parent_that_uses_it_is_a_circle() {
    let dir = std::env::temp_dir().join(format!("import-circles-{}", std::process::id()));
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod a;\npub mod b;\n#[cfg(test)]\nmod t;\n");
    write(
        "a/mod.rs",
        "pub mod child;\npub mod leaf;\npub use child::Thing;\npub use leaf::Leaf;\n\
         /// crate::b::g in a comment\npub struct Parent;\n\
         pub fn make(l: leaf::Leaf) -> child::Thing { child::Thing(l) }\n",
    );
    write(
        "a/child.rs",
        "use super::Leaf;\npub struct Thing(pub Leaf);\nfn f() { let _ = \"super::Parent\"; }\n\
         #[cfg(test)]\nmod tests { use super::super::Parent; }\n",
    );
    write("a/leaf.rs", "pub struct Leaf;\n");
    write(
        "b.rs",
        "pub fn g(t: crate::a::Thing) -> crate::a::Leaf { t.0 }\n",
    );
    write("t.rs", "use crate::a::Parent;\n");
    let (files, found) = report(&dir);
    assert_eq!(files, 5, "t.rs is test-only");
    assert!(found.is_empty(), "{found:?}");

    write(
        "a/child.rs",
        "use super::*;\npub struct Thing(pub Leaf, Parent);\n",
    );
    let (_, found) = report(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    let (members, text) = &found[0];
    assert_eq!(members, &["src/a/child.rs", "src/a/mod.rs"], "{text}");
    assert!(
        text.contains("src/a/child.rs -> src/a/mod.rs: a::Parent")
            && text.contains("src/a/mod.rs -> src/a/child.rs"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The reader through globs: a name a file takes with `use super::*` that its parent re-exports
/// with `pub use sibling::*` ties the file to the sibling that defines it, and so does a name a
/// `mod.rs` uses from its own glob re-export, or a format string captures; a private item does
/// not pass a glob re-export, and a name the file binds itself is its own.
#[test]
fn a_name_through_a_glob_re_export_ties_the_file_that_defines_it() {
    let dir = std::env::temp_dir().join(format!("import-circles-globs-{}", std::process::id()));
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod a;\n");
    write(
        "a/mod.rs",
        "mod x;\nmod y;\nmod z;\npub use x::*;\npub use y::*;\npub use z::*;\n\
         pub fn shared() {}\n",
    );
    write(
        "a/x.rs",
        "use super::*;\npub const FX: u8 = 1;\npub fn fx() { shared(); fz(); }\nfn helper() {}\n",
    );
    write(
        "a/y.rs",
        "use super::*;\npub fn fy(fx: u8) -> String { helper(); format!(\"{fx}\") }\n",
    );
    write("a/z.rs", "use super::*;\npub fn fz() { fy(0); }\n");
    let (files, found) = report(&dir);
    assert_eq!(files, 5);
    assert!(found.is_empty(), "{found:?}");

    write(
        "a/y.rs",
        "use super::*;\npub fn fy(n: u8) -> String { fx(); format!(\"{FX:>2}{n}\") }\n",
    );
    let (_, found) = report(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    let (members, text) = &found[0];
    assert_eq!(
        members,
        &["src/a/x.rs", "src/a/y.rs", "src/a/z.rs"],
        "{text}"
    );
    assert!(
        text.contains("src/a/x.rs -> src/a/z.rs: a::fz")
            && text.contains("src/a/y.rs -> src/a/x.rs: a::FX, a::fx")
            && text.contains("src/a/z.rs -> src/a/y.rs: a::fy"),
        "{text}"
    );

    write(
        "a/y.rs",
        "use super::*;\npub fn fy(n: u8) -> u8 { shared(); n }\n",
    );
    write(
        "a/mod.rs",
        "mod x;\nmod y;\nmod z;\npub use x::*;\npub use y::*;\npub use z::*;\n\
         pub fn shared() {}\npub fn twice() { fy(1); }\n",
    );
    let (_, found) = report(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    let (members, text) = &found[0];
    assert_eq!(members, &["src/a/mod.rs", "src/a/y.rs"], "{text}");
    assert!(
        text.contains("src/a/mod.rs -> src/a/y.rs: a::y::fy")
            && text.contains("src/a/y.rs -> src/a/mod.rs: a::shared"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
