//! Rooms of one concern: no source file outside tests is longer than a reader can hold (600
//! lines), and no two files of a crate import each other, directly or through others (a helper
//! two modules share goes below both).
//!
//! The import graph is read from paths, not from the compiler: a file's edges are its
//! `crate::`, `super::` and `self::` paths (and, in a crate or module root, paths through its
//! child modules), each resolved to the deepest module file that exists. A module and the files
//! inside it (its children, and its root for each) are one room: those edges are not counted,
//! since a crate root re-exports what its children define and the children implement what it
//! declares. Comments and inline `#[cfg(test)] mod` blocks are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest a source file outside tests may be.
const MAX_LINES: usize = 600;

type Module = Vec<String>;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != "node_modules" && !name.to_string_lossy().starts_with('.') {
                source_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn workspace_files() -> Vec<PathBuf> {
    let root = super::root();
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "fuzz"] {
        source_files(&root.join(dir), &mut files);
    }
    files.sort();
    files
}

/// The crate source folders: `crates/*/src` and `xtask/src`.
fn source_roots() -> Vec<PathBuf> {
    let root = super::root();
    let mut roots: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/ is readable")
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    roots.push(root.join("xtask").join("src"));
    roots.sort();
    roots
}

fn is_test_file(path: &Path) -> bool {
    path.components().any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "benches" | "fuzz")))
        || path.file_name().is_some_and(|n| n == "tests.rs")
}

/// The text without comments and without an inline test module (from `#[cfg(test)] mod` on).
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    for line in text.lines() {
        let line = match line.find("//") {
            // Not inside a string literal such as "http://…": good enough for paths.
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]") {
        let start = from + at;
        let rest = code[start + "#[cfg(test)]".len()..].trim_start();
        let rest = rest.strip_prefix("pub ").unwrap_or(rest).trim_start();
        if rest.starts_with("mod ") {
            code.truncate(start);
            break;
        }
        from = start + 1;
    }
    code
}

#[derive(Debug, PartialEq, Clone)]
enum Token {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        out.push(match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::Path
            }
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ => Token::Other,
        });
        i += 1;
    }
    out
}

/// The paths of a `use` tree or an expression path starting at `at` (just after `base::`).
fn tree(tokens: &[Token], mut at: usize, base: Module, out: &mut Vec<Module>) -> usize {
    let mut path = base;
    loop {
        match tokens.get(at) {
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                at += 1;
                if tokens.get(at) == Some(&Token::Path) {
                    at += 1;
                    continue;
                }
                out.push(path);
                return at;
            }
            Some(Token::Open) => {
                at += 1;
                while !matches!(tokens.get(at), None | Some(Token::Close)) {
                    at = tree(tokens, at, path.clone(), out);
                    while !matches!(tokens.get(at), None | Some(Token::Close) | Some(Token::Comma)) {
                        at += 1;
                    }
                    if tokens.get(at) == Some(&Token::Comma) {
                        at += 1;
                    }
                }
                out.push(path);
                return at + 1;
            }
            _ => {
                out.push(path);
                return at;
            }
        }
    }
}

/// Every module path `code` names, as seen from the file of module `here`.
fn named_paths(code: &str, here: &Module, is_root: bool, children: &BTreeSet<String>) -> Vec<Module> {
    let tokens = tokens(code);
    let mut out = Vec::new();
    for (at, token) in tokens.iter().enumerate() {
        let Token::Ident(name) = token else { continue };
        let after_path = at > 0 && tokens[at - 1] == Token::Path;
        if after_path || tokens.get(at + 1) != Some(&Token::Path) {
            continue;
        }
        let mut base = match name.as_str() {
            "crate" => Vec::new(),
            "self" => here.clone(),
            "super" => here[..here.len().saturating_sub(1)].to_vec(),
            child if is_root && children.contains(child) => {
                let mut module = here.clone();
                module.push(child.to_owned());
                module
            }
            _ => continue,
        };
        let mut next = at + 2;
        // `super::super::`
        while tokens.get(next) == Some(&Token::Ident("super".into())) && tokens.get(next + 1) == Some(&Token::Path) {
            base.pop();
            next += 2;
        }
        tree(&tokens, next, base, &mut out);
    }
    out
}

fn module_of(src: &Path, file: &Path) -> (Module, bool) {
    let relative = file.strip_prefix(src).expect("a file of this source folder").with_extension("");
    let mut module: Module = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let is_root = matches!(module.last().map(String::as_str), Some("lib" | "main" | "mod"));
    if is_root {
        module.pop();
    }
    (module, is_root)
}

fn related(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The import edges between the files of one source folder.
fn import_graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    source_files(src, &mut files);
    let modules: BTreeMap<Module, (PathBuf, bool)> = files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "bin"))
        .map(|f| {
            let (module, is_root) = module_of(src, f);
            (module, (f.clone(), is_root))
        })
        .collect();
    let mut graph = BTreeMap::new();
    for (module, (file, is_root)) in &modules {
        let children: BTreeSet<String> = modules
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m[module.len()].clone())
            .collect();
        let code = code_of(&std::fs::read_to_string(file).expect("a readable source file"));
        let mut edges = BTreeSet::new();
        for path in named_paths(&code, module, *is_root, &children) {
            let target = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|m| modules.contains_key(m));
            if let Some(target) = target.filter(|t| !related(t, module)) {
                edges.insert(target);
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

/// The groups of files that import each other (strongly connected, more than one file).
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    let reaches = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&Module, BTreeSet<Module>> = graph.keys().map(|m| (m, reaches(m))).collect();
    let mut grouped = BTreeSet::new();
    let mut out = Vec::new();
    for m in graph.keys() {
        if grouped.contains(m) || !reach[m].contains(m) {
            continue;
        }
        let group: Vec<Module> =
            graph.keys().filter(|o| reach[m].contains(*o) && reach[*o].contains(m)).cloned().collect();
        grouped.extend(group.iter().cloned());
        out.push(group);
    }
    out
}

fn shown(module: &Module) -> String {
    if module.is_empty() { "<root>".into() } else { module.join("/") }
}

#[test]
fn no_source_file_outside_tests_is_longer_than_600_lines() {
    let long: Vec<String> = workspace_files()
        .into_iter()
        .filter(|f| !is_test_file(f))
        .filter_map(|f| {
            let lines = std::fs::read_to_string(&f).unwrap_or_default().lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these along their concerns (at most {MAX_LINES} lines):\n{}", long.join("\n"));
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let mut found = Vec::new();
    for src in source_roots() {
        let graph = import_graph(&src);
        for group in circles(&graph) {
            let edges: Vec<String> = group
                .iter()
                .flat_map(|a| {
                    graph[a].iter().filter(|b| group.contains(b)).map(move |b| format!("{} -> {}", shown(a), shown(b)))
                })
                .collect();
            found.push(format!("{}: {}", src.display(), edges.join(", ")));
        }
    }
    assert!(found.is_empty(), "import circles (move what both need below both):\n{}", found.join("\n"));
}

#[test]
fn the_import_reader_sees_use_trees_relative_paths_and_child_modules() {
    let code = code_of(
        "use crate::a::{b::C, d};\nuse super::e;\nfn f() { child::g(); x::y(); }\n// crate::commented\n\
         #[cfg(test)]\nmod tests { use crate::tested; }",
    );
    let children = BTreeSet::from(["child".to_owned()]);
    let here: Module = vec!["m".into()];
    let paths = named_paths(&code, &here, true, &children);
    let has = |p: &[&str]| paths.iter().any(|q| q == &p.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert!(has(&["a", "b", "C"]) && has(&["a", "d"]) && has(&["e"]) && has(&["m", "child", "g"]), "{paths:?}");
    assert!(!paths.iter().flatten().any(|s| s == "commented" || s == "tested" || s == "y"), "{paths:?}");
    let graph = BTreeMap::from([
        (vec!["a".to_owned()], BTreeSet::from([vec!["b".to_owned()]])),
        (vec!["b".to_owned()], BTreeSet::from([vec!["a".to_owned()]])),
        (vec!["c".to_owned()], BTreeSet::from([vec!["a".to_owned()]])),
    ]);
    assert_eq!(circles(&graph), vec![vec![vec!["a".to_owned()], vec!["b".to_owned()]]]);
}
