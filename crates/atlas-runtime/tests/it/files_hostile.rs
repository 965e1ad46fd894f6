//! Memory as files against a bank a person received from someone else or edited by hand (the
//! hostile probe of issue 44): a planted journal, a person's own files, links, damaged pages,
//! lines moved between scopes, values import refuses, a sync killed between its steps, and two
//! document folders in one space. Each case failed before the fix.

use atlas_domain::{Body, Memory, MemoryKind, RecallFilter};
use atlas_runtime::{Atlas, Config, ImportOptions};
use proptest::prelude::*;
use std::path::Path;

use crate::files_support;
use files_support::*;

/// The demo space with a second user, mallory, who has a page of her own.
async fn two_users(dir: &Path) -> Atlas {
    let atlas = sqlite(&dir.join("a.db"), Config::default()).await;
    let extra = dir.join("mallory.jsonl");
    std::fs::write(
        &extra,
        r#"{"session":"m1","speaker":"Mallory","text":"My laptop died.\n- S:laptop: broken","time":"2024-03-05T09:00:00Z","scope":{"user":"mallory"}}
"#,
    )
    .unwrap();
    atlas.import_file(&fixture("changes.jsonl"), ImportOptions::default(), None).await.unwrap();
    atlas.import_file(&extra, ImportOptions::default(), None).await.unwrap();
    atlas.consolidate_ending_sessions().await.unwrap();
    atlas
}

/// The current facts and core entries as (kind, user, text), sorted: what two spaces that
/// believe the same hold, whatever their ids and times.
async fn current(atlas: &Atlas) -> Vec<(String, Option<String>, String)> {
    let filter = RecallFilter { kinds: vec![MemoryKind::Fact, MemoryKind::Core], ..RecallFilter::default() };
    let mut out: Vec<_> = atlas
        .latest(filter, 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|m: &Memory| m.validity.valid_until.is_none())
        .map(|m| (m.kind().to_string(), m.scope.user.clone(), m.text.clone()))
        .collect();
    out.sort();
    out
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from:?} not in {}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[tokio::test]
async fn a_planted_journal_is_refused_whole_and_nothing_outside_the_bank_changes() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let (bank, out) = (dir.path().join("B"), dir.path().join("out"));
    std::fs::create_dir_all(bank.join(".atlas-staging")).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("victim.txt"), "original\n").unwrap();
    std::fs::write(bank.join(".atlas-staging/0"), "echo pwned\n").unwrap();
    let planted = format!("rename 0 {}/fake-bashrc\nremove ../out/victim.txt\n", out.display());
    std::fs::write(bank.join(".atlas-staging/JOURNAL"), &planted).unwrap();
    let fresh = sqlite(&dir.path().join("new.db"), Config::default()).await;
    let rebuild = fresh.bank_rebuild(&bank).await.unwrap_err().to_string();
    assert!(rebuild.contains(".atlas-staging"), "{rebuild}");
    for error in [atlas.bank_write(&bank).await.unwrap_err(), atlas.bank_sync(&bank).await.unwrap_err()] {
        let error = error.to_string();
        assert!(error.contains("JOURNAL:1") && error.contains("nothing was done"), "{error}");
    }
    // The same with the current journal's form and paths that leave the folder.
    let hash = sha256("echo pwned\n");
    let planted = format!("rename 0 {hash} - ../out/fake-bashrc.md\nremove ../out/victim.txt\n");
    std::fs::write(bank.join(".atlas-staging/JOURNAL"), &planted).unwrap();
    let error = atlas.bank_write(&bank).await.unwrap_err().to_string();
    assert!(error.contains("leaves its folder"), "{error}");
    assert_eq!(std::fs::read_to_string(out.join("victim.txt")).unwrap(), "original\n");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1, "nothing was written outside the bank");
    assert!(!bank.join("README.md").exists(), "a refused journal leaves the bank as it was too");
}

#[tokio::test]
async fn a_write_leaves_a_persons_files_byte_identical_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let bank = dir.path().join("project");
    std::fs::create_dir_all(bank.join("user-ann/entities")).unwrap();
    std::fs::write(bank.join("README.md"), "# my readme\n").unwrap();
    std::fs::write(bank.join("user-ann/entities/Rust.md"), "my own notes on Rust\n").unwrap();
    let written = atlas.bank_write(&bank).await.unwrap();
    assert_eq!(std::fs::read_to_string(bank.join("README.md")).unwrap(), "# my readme\n");
    assert_eq!(std::fs::read_to_string(bank.join("user-ann/entities/Rust.md")).unwrap(), "my own notes on Rust\n");
    let skipped: Vec<&str> = written.skipped.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(skipped, ["README.md", "user-ann/entities/Rust.md"], "{written:?}");
    assert!(written.skipped[0].reason.contains("did not write"), "{written:?}");
    // Still a bank (its manifest says so): a sync works, and a second write changes nothing.
    atlas.bank_sync(&bank).await.unwrap();
    let again = atlas.bank_write(&bank).await.unwrap();
    assert_eq!((again.changed, again.removed, again.skipped.len()), (0, 0, 2));
    // A page the bank wrote and a person edited is not written over by a write; a sync takes
    // the edit in and writes the page again.
    let page = bank.join("user-ann/entities/checkout-service.md");
    edit(&page, "## Now\n\n", "## Now\n\n- owner: the payments team\n");
    let edited = std::fs::read_to_string(&page).unwrap();
    let written = atlas.bank_write(&bank).await.unwrap();
    assert_eq!(std::fs::read_to_string(&page).unwrap(), edited);
    assert!(written.skipped.iter().any(|s| s.path.ends_with("checkout-service.md") && s.reason.contains("bank sync")));
    let synced = atlas.bank_sync(&bank).await.unwrap();
    assert_eq!(synced.added, 1);
    assert!(std::fs::read_to_string(&page).unwrap().lines().any(|l| l.starts_with("- owner: the payments team ^")));
}

#[cfg(unix)]
#[tokio::test]
async fn links_inside_the_bank_are_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let (bank, elsewhere) = (dir.path().join("B"), dir.path().join("elsewhere"));
    std::fs::create_dir_all(bank.join("user-ann")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, bank.join("user-ann/entities")).unwrap();
    let error = atlas.bank_write(&bank).await.unwrap_err().to_string();
    assert!(error.contains("a link") && error.contains("user-ann/entities"), "{error}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "no page went through the link");
    std::fs::remove_file(bank.join("user-ann/entities")).unwrap();
    // The lock file as a link: refused, its target never made.
    std::fs::remove_file(bank.join(".atlas-lock")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("made"), bank.join(".atlas-lock")).unwrap();
    let error = atlas.bank_write(&bank).await.unwrap_err().to_string();
    assert!(error.contains(".atlas-lock") && error.contains("a link"), "{error}");
    assert!(!elsewhere.join("made").exists());
    std::fs::remove_file(bank.join(".atlas-lock")).unwrap();
    atlas.bank_write(&bank).await.unwrap();
    // A bank reached through a link is resolved once and used.
    let through = dir.path().join("through");
    std::os::unix::fs::symlink(&bank, &through).unwrap();
    assert_eq!(atlas.bank_write(&through).await.unwrap().changed, 0);
}

#[tokio::test]
async fn a_rebuild_writes_nothing_into_the_bank() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let bank = dir.path().join("bank");
    atlas.bank_write(&bank).await.unwrap();
    std::fs::remove_file(bank.join(".atlas-lock")).unwrap();
    let before: Vec<_> = std::fs::read_dir(&bank).unwrap().map(|e| e.unwrap().file_name()).collect();
    let tree = read_tree(&bank);
    let fresh = sqlite(&dir.path().join("new.db"), Config::default()).await;
    assert!(fresh.bank_rebuild(&bank).await.unwrap() > 0);
    let after: Vec<_> = std::fs::read_dir(&bank).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(before, after, "no lock file or anything else made");
    assert_eq!(read_tree(&bank), tree);
}

#[tokio::test]
async fn sync_and_rebuild_check_what_import_checks_and_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = two_users(dir.path()).await;
    let bank = dir.path().join("bank");
    atlas.bank_write(&bank).await.unwrap();
    let page = bank.join("user-ann/entities/checkout-service.md");
    let original = std::fs::read_to_string(&page).unwrap();
    let before = current(&atlas).await;
    let refused = |text: String| {
        let (atlas, page, original) = (&atlas, &page, &original);
        async move {
            std::fs::write(page, text).unwrap();
            let error = atlas.bank_sync(&bank_of(page)).await.unwrap_err().to_string();
            std::fs::write(page, original).unwrap();
            error
        }
    };
    let big = "x".repeat(2 << 20);
    let error = refused(original.replace("## Now\n\n", &format!("## Now\n\n- owner: {big}\n"))).await;
    assert!(error.contains("checkout-service.md:") && error.contains("exceeds the limit"), "{}", &error[..200]);
    let error = refused(original.replace("## Now\n\n", "## Now\n\n- owner: \"a\\u0000b\"\n")).await;
    assert!(error.contains("NUL"), "{error}");
    // A line of ann's moved onto mallory's page.
    let ann_line = original.lines().find(|l| l.starts_with("- state:")).unwrap().to_owned();
    let mallory = bank.join("user-mallory/entities/laptop.md");
    let mallory_text = std::fs::read_to_string(&mallory).unwrap();
    std::fs::write(&mallory, mallory_text.replace("## Now\n\n", &format!("## Now\n\n{ann_line}\n"))).unwrap();
    let error = refused(original.replace(&format!("{ann_line}\n"), "")).await;
    assert!(error.contains("laptop.md:") && error.contains("belongs to user-ann"), "{error}");
    std::fs::write(&mallory, &mallory_text).unwrap();
    // Front matter naming another user than the page's folder.
    let error = refused(original.replace("user: \"ann\"", "user: \"mallory\"")).await;
    assert!(error.contains("checkout-service.md:4") && error.contains("not its folder's"), "{error}");
    // A page's entity that is an episode, or no memory at all, with a new line.
    let with_line = original.replace("## Now\n\n", "## Now\n\n- owner: the payments team\n");
    let entity_line = original.lines().find(|l| l.starts_with("entity: ")).unwrap().to_owned();
    let error = refused(with_line.replace(&entity_line, "entity: 1")).await;
    assert!(error.contains("is a episode, not an entity"), "{error}");
    let error = refused(with_line.replace(&entity_line, "entity: 99999")).await;
    assert!(error.contains("checkout-service.md:") && error.contains("not a current entity"), "{error}");
    assert_eq!(current(&atlas).await, before, "nothing refused changed the space");
    // A History whose validity ends before it begins: a rebuild refuses it with its line.
    let until = original.lines().find(|l| l.contains("  - valid:") && !l.ends_with("now")).unwrap().to_owned();
    let (from, to) = until.trim_start_matches("  - valid: ").split_once(" → ").unwrap();
    std::fs::write(&page, original.replace(&until, &format!("  - valid: {to} → {from}"))).unwrap();
    let fresh = sqlite(&dir.path().join("new.db"), Config::default()).await;
    let error = fresh.bank_rebuild(&bank).await.unwrap_err().to_string();
    assert!(error.contains("checkout-service.md:") && error.contains("valid_until"), "{error}");
}

fn bank_of(page: &Path) -> std::path::PathBuf {
    page.ancestors().nth(3).unwrap().to_owned()
}

#[tokio::test]
async fn a_damaged_page_is_refused_with_its_line_and_a_byte_order_mark_is_read_through() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = two_users(dir.path()).await;
    let bank = dir.path().join("bank");
    atlas.bank_write(&bank).await.unwrap();
    let page = bank.join("user-ann/entities/checkout-service.md");
    let original = std::fs::read_to_string(&page).unwrap();
    let before = current(&atlas).await;
    // Cut short in the middle of its current line: no new fact from half a line.
    let cut = original.find(" ^19").unwrap() - 6;
    std::fs::write(&page, &original[..cut]).unwrap();
    let error = atlas.bank_sync(&bank).await.unwrap_err().to_string();
    assert!(error.contains("checkout-service.md:") && error.contains("cut short"), "{error}");
    // Cut at the end of a line, before its History.
    let cut = original.find("## History").unwrap();
    std::fs::write(&page, &original[..cut]).unwrap();
    let error = atlas.bank_sync(&bank).await.unwrap_err().to_string();
    assert!(error.contains("no \"## History\""), "{error}");
    assert_eq!(current(&atlas).await, before);
    // Saved by an editor with a byte-order mark: the edit is taken in, not thrown away.
    let edited = original.replace("## Now\n\n", "## Now\n\n- owner: the payments team\n");
    std::fs::write(&page, format!("\u{feff}{edited}")).unwrap();
    let synced = atlas.bank_sync(&bank).await.unwrap();
    assert_eq!(synced.added, 1, "{synced:?}");
    assert!(current(&atlas).await.iter().any(|(_, _, text)| text.contains("the payments team")));
}

#[tokio::test]
async fn documents_of_two_folders_coexist_and_a_sync_that_would_forget_most_must_be_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    let (one, two) = (dir.path().join("docs1"), dir.path().join("docs2"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    std::fs::write(one.join("a.md"), "## Deploy\n\nBlue-green.\n\n## Rollback\n\nThe release tool.\n").unwrap();
    std::fs::write(two.join("b.md"), "## Paging\n\nPage the payments team.\n").unwrap();
    assert_eq!(atlas.docs_sync(&one, false).await.unwrap().added, 2);
    let second = atlas.docs_sync(&two, false).await.unwrap();
    assert_eq!((second.added, second.removed), (1, 0), "another folder's sections are not its to forget");
    let again = atlas.docs_sync(&one, false).await.unwrap();
    assert_eq!((again.unchanged, again.removed), (2, 0));
    // Emptied: refused unless allowed.
    std::fs::remove_file(two.join("b.md")).unwrap();
    let error = atlas.docs_sync(&two, false).await.unwrap_err().to_string();
    assert!(error.contains("--allow-removals") && error.contains("1 of the folder's 1"), "{error}");
    assert_eq!(atlas.docs_sync(&two, true).await.unwrap().removed, 1);
    // A renamed file keeps its sections' history.
    let old_ids: Vec<_> =
        docs(&atlas).await.iter().filter(|m| m.validity.valid_until.is_none()).map(|m| m.id).collect();
    std::fs::rename(one.join("a.md"), one.join("guide.md")).unwrap();
    let moved = atlas.docs_sync(&one, false).await.unwrap();
    assert_eq!((moved.moved, moved.added, moved.removed), (2, 0, 0), "{moved:?}");
    for m in docs(&atlas).await.iter().filter(|m| m.validity.valid_until.is_none()) {
        let Body::Doc { path, .. } = &m.body else { unreachable!() };
        assert_eq!(path, "guide.md");
        let explained = atlas.explain(m.id).await.unwrap().unwrap();
        assert!(explained.replaced.iter().any(|old| old_ids.contains(&old.id)), "{:?}", explained.replaced);
    }
}

async fn docs(atlas: &Atlas) -> Vec<Memory> {
    let filter = RecallFilter { kinds: vec![MemoryKind::Doc], ..RecallFilter::default() };
    atlas.latest(filter, 100).await.unwrap()
}

/// The edits a person makes before a sync: (page index, change) pairs.
#[derive(Debug, Clone)]
enum Change {
    Add(String),
    EditFirst(String),
    RemoveFirst,
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        "[a-z]{3,8}( [a-z]{2,6}){0,2}".prop_map(Change::Add),
        "[a-z]{3,8}( [a-z]{2,6}){0,2}".prop_map(Change::EditFirst),
        Just(Change::RemoveFirst),
    ]
}

/// Applies `changes` to the entity pages of `bank`, the same way on every copy.
fn apply(bank: &Path, changes: &[(usize, Change)]) {
    let dir = bank.join("user-ann/entities");
    let mut pages: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    pages.sort();
    for (i, change) in changes {
        let page = &pages[i % pages.len()];
        let text = std::fs::read_to_string(page).unwrap();
        let (head, rest) = text.split_once("## Now\n\n").unwrap();
        let first = rest.lines().next().filter(|l| l.starts_with("- ") && l.contains(" ^")).map(str::to_owned);
        let rest = match (change, first) {
            (Change::Add(value), _) => format!("- noted: {value}\n{rest}"),
            (Change::EditFirst(value), Some(line)) => {
                let (label, anchor) = (line.split_once(": ").unwrap().0, line.rsplit_once(" ^").unwrap().1);
                rest.replacen(&line, &format!("{label}: {value} ^{anchor}"), 1)
            }
            (Change::RemoveFirst, Some(line)) => rest.replacen(&format!("{line}\n"), "", 1),
            _ => rest.to_owned(),
        };
        std::fs::write(page, format!("{head}## Now\n\n{rest}")).unwrap();
    }
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(12))]

    /// A sync cut short after any of its steps (nothing committed; the new versions and facts
    /// committed; the forgettings too; the folder not written again) and then run again gives
    /// the space one uninterrupted sync gives, and the same bank.
    #[test]
    fn a_sync_cut_at_any_step_and_run_again_believes_what_one_sync_believes(
        changes in proptest::collection::vec((0usize..8, change()), 1..6),
        cut in 0usize..3,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut results = Vec::new();
            for interrupted in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
                demo(&atlas).await;
                let bank = dir.path().join("bank");
                atlas.bank_write(&bank).await.unwrap();
                apply(&bank, &changes);
                if interrupted {
                    atlas.bank_sync_cut(&bank, cut).await.unwrap();
                }
                atlas.bank_sync(&bank).await.unwrap();
                let again = atlas.bank_sync(&bank).await.unwrap();
                prop_assert_eq!((again.edited, again.added, again.forgotten), (0, 0, 0));
                let tree: Vec<(String, String)> = read_tree(&bank)
                    .into_iter()
                    .map(|(path, text)| (path, text.lines().filter(|l| !l.contains("learned:") && !l.contains("valid:") && !l.contains("said:")).collect::<Vec<_>>().join("\n")))
                    .collect();
                results.push((current(&atlas).await, tree));
            }
            prop_assert_eq!(&results[0].0, &results[1].0);
            prop_assert_eq!(&results[0].1, &results[1].1);
            Ok(())
        })?;
    }
}
