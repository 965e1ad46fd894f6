//! Tidy: the project's conventions, checked like any other test.

use std::path::{Path, PathBuf};

mod rooms;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // Build output and installed packages (npm's, which ship fixtures of their own) are
            // not the project's files.
            if path.file_name().is_some_and(|n| n != "target" && n != "node_modules") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_starts_by_saying_what_it_owns() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    rust_files(&root().join("xtask"), &mut files);
    let missing: Vec<_> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| f.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a leading //! line: {missing:?}");
}

/// Every property test takes its case count from the one knob (`atlas_testing::proptest_config`,
/// which `ATLAS_TEST_SCALE` and `PROPTEST_CASES` turn), never a number of its own.
#[test]
fn every_property_test_takes_its_cases_from_the_knob() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let opens_a_block = line.trim_end().ends_with("proptest! {");
            let config = lines.get(i + 1).copied().unwrap_or("");
            if opens_a_block && !config.contains("proptest_config(atlas_testing::proptest_config(") {
                wrong.push(format!("{name}:{}: a proptest! block without atlas_testing::proptest_config(N)", i + 2));
            }
            if line.contains("cases:") && line.contains("Config {") && !name.ends_with("atlas-testing/src/scale.rs") {
                wrong.push(format!("{name}:{}: a case count of its own", i + 1));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// atlas-domain does no I/O: none of these may appear among its dependencies.
#[test]
fn the_domain_crate_depends_on_no_io_crate() {
    let manifest = std::fs::read_to_string(root().join("crates/atlas-domain/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
    for banned in
        ["rusqlite", "sqlite-vec", "tokio", "ort", "tokenizers", "qdrant-client", "reqwest", "hyper", "tempfile"]
    {
        assert!(
            !deps.lines().any(|l| l.split(['=', ' ', '.']).next() == Some(banned)),
            "atlas-domain must not depend on {banned}"
        );
    }
    let mut files = Vec::new();
    rust_files(&root().join("crates/atlas-domain/src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for io in ["std::fs", "std::net", "std::process", "std::time::SystemTime", "std::env"] {
            assert!(!text.contains(io), "{} uses {io}; atlas-domain does no I/O", f.display());
        }
    }
}

/// Only atlas-runtime (and the tools around it) may name adapter crates.
#[test]
fn only_the_runtime_knows_the_adapters() {
    for krate in ["atlas-domain", "atlas-testing", "atlas-cli"] {
        let manifest = std::fs::read_to_string(root().join("crates").join(krate).join("Cargo.toml")).unwrap();
        let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
        for adapter in ["atlas-store-", "atlas-embed-", "atlas-llm"] {
            assert!(!deps.contains(adapter), "{krate} depends on an adapter ({adapter}) directly");
        }
    }
}

#[test]
fn every_migration_file_is_embedded_in_order() {
    let mut files: Vec<String> = std::fs::read_dir(root().join("migrations"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    files.sort();
    let source = std::fs::read_to_string(root().join("crates/atlas-store-sqlite/src/migrations.rs")).unwrap();
    let mut last = 0;
    for (i, file) in files.iter().enumerate() {
        assert!(
            file.starts_with(&format!("{:04}_", i + 1)),
            "{file}: migrations are numbered 0001, 0002, … without gaps"
        );
        let at = source.find(&format!("migrations/{file}")).unwrap_or_else(|| panic!("{file} is not embedded"));
        assert!(at > last, "{file} is embedded out of order");
        last = at;
    }
}
