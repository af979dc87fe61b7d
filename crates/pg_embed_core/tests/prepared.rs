//! The shared prepared-weights file: every model gives bit for bit the same outputs from
//! the mapped file (built by this load, or found) as from private memory, and a file that
//! is damaged, foreign, unwritable or raced for is rebuilt or worked around, never trusted.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::{Pipeline, Share};
use pg_embed_core::prepared::Store;

fn temp_store(name: &str) -> (PathBuf, Store) {
    let dir = std::env::temp_dir().join(format!("pg_embed_prepared_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).unwrap();
    (dir, store)
}

/// The repository, canonical (links in the fixtures point inside it).
fn repo() -> PathBuf {
    root().canonicalize().unwrap()
}

fn no_interrupt() -> pg_embed_core::error::Result<()> {
    Ok(())
}

fn load_shared(store: &Store, dir: &Path) -> pg_embed_core::error::Result<Pipeline> {
    let share = Share { store, files: None, model: "m", source: "src", interrupt: &no_interrupt, admit: None };
    Pipeline::load_shared(&repo(), &dir.canonicalize().unwrap(), &Options::default(), Some(&share))
}

/// As `load_shared`, then waits for the file this load writes (if it built the weights):
/// the file's path, or why it could not be written.
fn load_and_write(store: &Store, dir: &Path) -> (Pipeline, Result<PathBuf, String>) {
    let p = load_shared(store, dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let written = match (&p.sharing().writing, &p.sharing().file) {
        (Some(w), _) => w.wait().clone(),
        (None, Some(f)) => Ok(f.clone()),
        (None, None) => Err("neither mapped nor written".into()),
    };
    (p, written)
}

#[test]
fn every_model_gives_the_same_outputs_mapped_as_private() {
    let (tmp, store) = temp_store("all");
    let mut checked = 0;
    for dir in model_dirs() {
        let name = dir.display().to_string();
        let private = match Pipeline::load(&dir, &Options::default()) {
            Ok(p) => p,
            Err(private_err) => {
                // A folder that needs options: the shared path refuses it the same way.
                let shared_err = load_shared(&store, &dir).err().unwrap_or_else(|| panic!("{name} loaded shared only"));
                assert_eq!(shared_err.to_string(), private_err.to_string(), "{name}");
                continue;
            }
        };
        assert!(private.sharing().file.is_none(), "{name}");
        let want = outputs(&private);
        drop(private);
        let (built, written) = load_and_write(&store, &dir);
        let found = load_shared(&store, &dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (b, f) = (built.sharing(), found.sharing());
        assert!(b.built() && !f.built(), "{name}: the second load maps the first one's file");
        assert_eq!(f.file.as_ref(), Some(&written.unwrap()), "{name}");
        assert!(f.shared_bytes > 0 && f.note.is_none(), "{name}: {f:?}");
        assert_eq!(outputs(&built), want, "{name}: built (private while written)");
        assert_eq!(outputs(&found), want, "{name}: mapped");
        assert_eq!(built.info().parameters, found.info().parameters, "{name}");
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} models checked");
    println!("{checked} models: mapped outputs equal private ones bit for bit");
    let _ = std::fs::remove_dir_all(&tmp);
}

fn bert() -> PathBuf {
    root().join("tests/fixtures/backbones/bert")
}

fn the_file(store: &Store) -> PathBuf {
    let files: Vec<_> = store.list().unwrap().into_iter().filter(|f| f.header.is_some()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].path.clone()
}

#[test]
fn damaged_and_foreign_files_are_rebuilt_never_trusted() {
    let (tmp, store) = temp_store("damaged");
    let want = outputs(&Pipeline::load(&bert(), &Options::default()).unwrap());
    let path = load_and_write(&store, &bert()).1.unwrap();
    assert_eq!(path, the_file(&store));
    let good = std::fs::read(&path).unwrap();

    // One flipped bit in the weights; a cut file; an empty file; garbage.
    let mut flipped = good.clone();
    let last = flipped.len() - 5;
    flipped[last] ^= 1;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("a flipped bit", flipped, "checksum"),
        ("a cut file", good[..good.len() / 2].to_vec(), "sizes"),
        ("an empty file", Vec::new(), "not a pg_embed prepared file"),
        ("garbage", vec![7u8; 10_000], "not a pg_embed prepared file"),
    ];
    for (what, bytes, why) in cases {
        // Replaced by rename, as a DBA's copy would be: the file is never changed in place.
        let tmp_file = tmp.join("replacement");
        std::fs::write(&tmp_file, &bytes).unwrap();
        std::fs::rename(&tmp_file, &path).unwrap();
        let (p, written) = load_and_write(&store, &bert());
        let s = p.sharing();
        assert!(s.built(), "{what}: rebuilt");
        let note = s.note.clone().unwrap_or_default();
        assert!(note.contains(why), "{what}: {note}");
        assert_eq!(outputs(&p), want, "{what}");
        assert_eq!(written.unwrap(), path);
        assert_eq!(outputs(&load_shared(&store, &bert()).unwrap()), want, "{what}: mapped again");
        assert_eq!(std::fs::read(&path).unwrap().len(), good.len(), "{what}: a whole file again");
    }

    // A file of another model under this one's name (its header names another key).
    let (tmp2, other) = temp_store("damaged_other");
    let theirs = load_and_write(&other, &root().join("tests/fixtures/backbones/distilbert")).1.unwrap();
    std::fs::copy(theirs, tmp.join("foreign")).unwrap();
    std::fs::rename(tmp.join("foreign"), &path).unwrap();
    let (p, _) = load_and_write(&store, &bert());
    let note = p.sharing().note.clone().unwrap_or_default();
    assert!(p.sharing().built() && note.contains("expected"), "{note}");
    assert_eq!(outputs(&p), want);

    // A file whose weights are in the other CPU kind's layout (AVX-512 panels or torch's
    // rows, `PG_EMBED_CPU` decides which this process uses), under this file's name.
    use pg_embed_core::prepared::file;
    let ours = pg_embed_core::kernels::float32::layout();
    let other = if ours == "avx512-panels32" { "torch-rows" } else { "avx512-panels32" };
    let mut header = file::peek(&path).unwrap();
    header.layout = other.into();
    pg_embed_core::prepared::arena::write(&path, &header, &serde_json::json!({}), &file::Expect { key: &header.key, layout: other }).unwrap();
    assert_eq!(file::peek(&path).unwrap().layout, other);
    let (p, _) = load_and_write(&store, &bert());
    let note = p.sharing().note.clone().unwrap_or_default();
    assert!(p.sharing().built() && note.contains(&format!("layout {other}")), "{note}");
    assert_eq!(outputs(&p), want);
    assert_eq!(file::peek(&path).unwrap().layout, ours, "rewritten in this process's layout");
    let _ = std::fs::remove_dir_all(&tmp);
    let _ = std::fs::remove_dir_all(&tmp2);
}

#[test]
fn an_unwritable_file_leaves_the_weights_private() {
    let (tmp, store) = temp_store("unwritable");
    let want = outputs(&Pipeline::load(&bert(), &Options::default()).unwrap());
    let key = pg_embed_core::pipeline::prepared_key(&store, &repo(), &bert().canonicalize().unwrap(), &Options::default(), None).unwrap();
    // The temporary name taken by a directory: creating the file fails, as on a full disk.
    std::fs::create_dir_all(pg_embed_core::prepared::file::temporary_name(&store.path(&key))).unwrap();
    let (p, written) = load_and_write(&store, &bert());
    let s = p.sharing();
    assert!(s.file.is_none() && s.shared_bytes == 0, "{s:?}");
    let why = written.unwrap_err();
    assert!(why.contains("Is a directory"), "{why}");
    assert_eq!(outputs(&p), want);
    assert!(!store.path(&key).exists(), "no file under the real name");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn concurrent_loads_build_once() {
    let (tmp, store) = temp_store("concurrent");
    let dir = root().join("models/all-MiniLM-L6-v2");
    // The files' digests remembered first (as after any earlier load): the key is known
    // at once, so the loads meet at the build lock.
    pg_embed_core::pipeline::prepared_key(&store, &repo(), &dir.canonicalize().unwrap(), &Options::default(), None).unwrap();
    let results: Vec<(bool, Vec<Vec<f32>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let (p, written) = load_and_write(&store, &dir);
                    assert!(written.is_ok(), "{written:?}");
                    (p.sharing().built(), outputs(&p))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|(built, _)| *built).count(), 1, "exactly one load built the file");
    assert!(results.windows(2).all(|w| w[0].1 == w[1].1));
    let leftovers: Vec<_> = store.list().unwrap().into_iter().filter(|f| f.path.to_string_lossy().contains(".tmp.")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn listing_in_use_and_cleanup() {
    let (tmp, store) = temp_store("cleanup");
    drop(load_and_write(&store, &bert()));
    let p = load_shared(&store, &bert()).unwrap();
    assert!(!p.sharing().built());
    let want = outputs(&p);
    let path = the_file(&store);
    let info = store.list().unwrap().into_iter().find(|f| f.path == path).unwrap();
    let header = info.header.clone().unwrap();
    assert_eq!((header.model.as_str(), header.source.as_str()), ("m", "src"));
    assert!(info.in_use, "mapped by this process");
    assert_eq!(info.bytes, std::fs::metadata(&path).unwrap().len());

    // Needed: kept. Not needed: removed, while the mapping that uses it keeps working.
    let key = header.key.clone();
    assert!(store.remove_unneeded(&BTreeSet::from([key.clone()])).unwrap().is_empty());
    assert!(path.exists());
    let removed = store.remove_unneeded(&BTreeSet::new()).unwrap();
    assert!(removed.iter().any(|f| f.path == path), "{removed:?}");
    assert!(!path.exists());
    assert_eq!(outputs(&p), want, "a removed file stays mapped for its readers");
    drop(p);
    let (again, written) = load_and_write(&store, &bert());
    assert!(again.sharing().built() && written.is_ok());
    drop(again);
    let info = store.list().unwrap().into_iter().find(|f| f.header.is_some()).unwrap();
    assert!(!info.in_use, "no longer mapped");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// What a file is needed for is decided for the whole server: a database's own keys, and
/// those the other databases noted, while they exist; a dropped database's note goes.
#[test]
fn needed_is_decided_for_every_database() {
    let (tmp, store) = temp_store("needs");
    let set = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<String>>();
    let dbs = |oids: &[u32]| oids.iter().copied().collect::<BTreeSet<u32>>();
    // Database 1 needs a and b; database 2 needs c (noted by a load there).
    assert_eq!(store.needed_server_wide(1, &set(&["a", "b"]), &dbs(&[1, 2])).unwrap(), set(&["a", "b"]));
    store.note_needed(2, "c").unwrap();
    store.note_needed(2, "c").unwrap();
    // Database 2's cleanup keeps database 1's files; database 1's keeps database 2's.
    assert_eq!(store.needed_server_wide(2, &set(&["c"]), &dbs(&[1, 2])).unwrap(), set(&["a", "b", "c"]));
    assert_eq!(store.needed_server_wide(1, &set(&["a"]), &dbs(&[1, 2])).unwrap(), set(&["a", "c"]));
    // Database 1 dropped: its note goes, and with it what it needed.
    assert_eq!(store.needed_server_wide(2, &set(&["c"]), &dbs(&[2])).unwrap(), set(&["c"]));
    assert!(!tmp.join("needs/1").exists());
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A temporary file left by a writer that ended (no process holds its key's lock) is
/// removed when the store is next opened; one whose writer holds the lock is kept.
#[test]
fn temporary_files_of_ended_writers_are_swept() {
    let (tmp, store) = temp_store("sweep");
    drop(store);
    let orphan = tmp.join("aaaa.weights.tmp.999999");
    let busy = tmp.join("bbbb.weights.tmp.999998");
    std::fs::write(&orphan, b"half a file").unwrap();
    std::fs::write(&busy, b"being written").unwrap();
    // A writer of key bbbb holds its lock (flock, as a building process does).
    let lock = std::fs::File::create(tmp.join("bbbb.lock")).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: flock on an open descriptor.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let _store = Store::open(&tmp).unwrap();
    assert!(!orphan.exists(), "the ended writer's file was removed");
    assert!(busy.exists(), "the file of a writer that holds its lock is kept");
    drop(lock);
    let _store = Store::open(&tmp).unwrap();
    assert!(!busy.exists(), "removed once its writer is gone");
    let _ = std::fs::remove_dir_all(&tmp);
}
