//! Import circles between the files of `src/`: read as a graph whose arrows run from a file to
//! every file it takes a name from, no two files may reach each other beyond the circles listed
//! in `KNOWN`, a list that only shrinks.
//!
//! An arrow is any path in code that names an item of another file: a `use` (groups, renames and
//! globs expanded; a glob counts for the names the file mentions), a path in an expression, a
//! type or an attribute (`crate::…`, `super::…`, `self::…`, a child module's name, or a name a
//! `use` brought in for a module). It runs to the file that defines the item, through any
//! `pub use` on the way, so a `mod.rs` that only re-exports ties nothing; a child that takes an
//! item its parent defines, while the parent uses the child, is a circle. `#[cfg(test)]` items,
//! test-only files and comments are not read.
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
    /// A string, character or number literal.
    Literal,
}

/// The tokens of Rust source without comments, with literals reduced to [`Token::Literal`].
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
            i = skip_string(&chars, i + 1);
            out.push(Token::Literal);
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

/// The longest prefix of a path that is a module, and whether it is all of the path.
type ModuleOfPath<'a> = dyn Fn(&[String]) -> Option<(Module, bool)> + 'a;

/// What a file offers by name: the items it defines and the names it re-exports.
#[derive(Default)]
struct Offer {
    defined: BTreeSet<String>,
    /// `pub use a::b as c;`: `c` -> `a::b`, absolute.
    reexported: BTreeMap<String, Vec<String>>,
    /// `pub use a::*;`: absolute module paths.
    globs: Vec<Vec<String>>,
}

/// Whether the `use` at `i` is `pub` (`pub use`, `pub(crate) use`, …).
fn is_pub_use(t: &[Token], i: usize) -> bool {
    let before = |n: usize| i.checked_sub(n).and_then(|at| t.get(at));
    before(1) == Some(&Token::Ident("pub".into()))
        || (before(1) == Some(&Token::Punct(')'))
            && (2..6).any(|n| before(n) == Some(&Token::Ident("pub".into()))))
}

/// The items each file defines outside any block, and what it re-exports.
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
                    }
                    if word == "use" && is_pub_use(t, i) {
                        for (path, local) in use_tree(t, i + 1, &[]).0 {
                            let Some(abs) = absolute(modules, &file.module, &path) else {
                                continue;
                            };
                            if local.is_empty() {
                                offer.globs.push(abs);
                            } else {
                                offer.reexported.insert(local, abs);
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

/// Arrows of the library: `(from, to) -> the paths that make it`. A name taken through a
/// re-export is an arrow to the file that defines it.
fn arrows(files: &[File]) -> BTreeMap<(PathBuf, PathBuf), BTreeSet<String>> {
    let modules: BTreeSet<Module> = files.iter().map(|f| f.module.clone()).collect();
    let paths: BTreeMap<&Module, &PathBuf> = files.iter().map(|f| (&f.module, &f.path)).collect();
    let offers = offers(files, &modules);
    // The longest prefix of `path` that is a module, and whether it is all of `path`.
    let module_of_path = |path: &[String]| -> Option<(Module, bool)> {
        (0..=path.len()).rev().find_map(|n| {
            let prefix = path[..n].to_vec();
            modules
                .contains(&prefix)
                .then_some((prefix, n == path.len()))
        })
    };
    // The file that defines what `path` names, following re-exports.
    fn defining<'a>(
        path: &[String],
        hops: usize,
        module_of_path: &ModuleOfPath<'_>,
        offers: &BTreeMap<Module, Offer>,
        paths: &BTreeMap<&Module, &'a PathBuf>,
    ) -> Option<&'a PathBuf> {
        let (module, whole) = module_of_path(path)?;
        let here = paths.get(&module).copied();
        if whole {
            // A path that ends at a module names an item of its parent of the same name
            // (`fn revision` beside `mod revision`): a module alone is never used by a path.
            let parent = &module[..module.len().saturating_sub(1)];
            let item = offers
                .get(parent)
                .is_some_and(|o| module.last().is_some_and(|n| o.defined.contains(n)));
            return if item {
                paths.get(&parent.to_vec()).copied()
            } else {
                here
            };
        }
        if hops > 8 {
            return here;
        }
        let name = &path[module.len()];
        let offer = offers.get(&module)?;
        if offer.defined.contains(name) {
            return here;
        }
        let rest = &path[module.len() + 1..];
        if let Some(target) = offer.reexported.get(name) {
            let mut next = target.clone();
            next.extend(rest.iter().cloned());
            return defining(&next, hops + 1, module_of_path, offers, paths).or(here);
        }
        for glob in &offer.globs {
            let offered = offers
                .get(glob)
                .is_some_and(|o| o.defined.contains(name) || o.reexported.contains_key(name));
            if offered {
                let mut next = glob.clone();
                next.extend(path[module.len()..].iter().cloned());
                return defining(&next, hops + 1, module_of_path, offers, paths).or(here);
            }
        }
        here
    }
    let mut arrows: BTreeMap<(PathBuf, PathBuf), BTreeSet<String>> = BTreeMap::new();
    for file in files {
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
        let mut found: Vec<Vec<String>> = Vec::new();
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
                    let public = is_pub_use(t, i);
                    let (used, after) = use_tree(t, i + 1, &[]);
                    for (path, local) in used {
                        let Some(abs) = absolute(&modules, &current, &path) else {
                            continue;
                        };
                        match module_of_path(&abs) {
                            // A module brought in by name: the paths that start with it count.
                            Some((_, true)) if !local.is_empty() => {
                                module_aliases.insert(local, abs);
                            }
                            // A glob: the names of that module this file mentions.
                            Some((module, true)) => {
                                if public {
                                    continue;
                                }
                                if let Some(offer) = offers.get(&module) {
                                    let names = offer
                                        .defined
                                        .iter()
                                        .chain(offer.reexported.keys())
                                        .filter(|n| idents.contains_key(n.as_str()));
                                    for name in names {
                                        let mut item = module.clone();
                                        item.push(name.clone());
                                        found.push(item);
                                    }
                                }
                            }
                            // A re-export counts only where the file itself uses the name.
                            Some(_)
                                if public
                                    && idents.get(local.as_str()).copied().unwrap_or(0) <= 1 => {}
                            Some(_) => found.push(abs),
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
                            None => absolute(&modules, &current, &path),
                        };
                        found.extend(abs);
                    }
                    i = j + 1;
                }
                _ => i += 1,
            }
        }
        for abs in found {
            if let Some(to) = defining(&abs, 0, &module_of_path, &offers, &paths) {
                if *to != file.path {
                    arrows
                        .entry((file.path.clone(), to.clone()))
                        .or_default()
                        .insert(abs.join("::"));
                }
            }
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
