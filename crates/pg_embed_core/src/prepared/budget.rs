//! Admission of builds: a registration, or a load that builds a model's weights, holds
//! memory outside mapped files while it builds (one tensor's working memory when it builds
//! into the shared file, see `super::arena`; the whole model when sharing is off). Before it
//! allocates, [`Ledger::admit`] checks that memory against what the machine can give
//! (MemAvailable, and the cgroup's limit when there is one) and against
//! `pg_embed.max_building_memory`, counting every build in progress in the server; a
//! request that does not fit waits (cancellably) up to `pg_embed.building_wait`, then fails
//! with SQLSTATE 53200 naming the figures. So concurrent registrations take turns instead
//! of getting the server OOM-killed.
//!
//! The builds in progress are a directory of the data directory (`pg_embed_building/`),
//! one file per build, held with an exclusive lock while the build runs. A process that
//! ends (even by kill -9) releases its lock with its descriptors: its file then counts for
//! nothing and is removed by the next admission. Deciding and recording are done under one
//! lock (`decide.lock`), so two requests never both take the last room.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// What a build asks for.
pub struct Request<'a> {
    /// What is built, for messages and for `held` (the model name and source).
    pub what: &'a str,
    /// Bytes it holds outside mapped files at its peak.
    pub need: u64,
    /// `pg_embed.max_building_memory`: the most all builds in progress may hold together.
    pub limit: Option<u64>,
    /// `pg_embed.building_wait`: how long it waits for room.
    pub wait: Duration,
}

/// A build in progress, as its file records it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Held {
    pub pid: u32,
    pub bytes: u64,
    pub what: String,
}

/// The room a build may take: the least of what the machine and its cgroup can give now.
#[derive(Debug, Clone, Copy, Default)]
pub struct Room {
    /// MemAvailable.
    pub available: Option<u64>,
    /// The cgroup's limit less what it uses that is not reclaimable page cache.
    pub cgroup: Option<u64>,
    /// MemTotal, or the cgroup's limit where it is lower: more than this never fits.
    pub total: Option<u64>,
}

impl Room {
    /// What the machine gives now, less a margin left to everything else (a tenth of the
    /// total, at most 512 MB).
    pub fn now() -> Room {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |name: &str| {
            meminfo.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok()).map(|kb| kb * 1024)
        };
        let cgroup = cgroup_room();
        let total = match (field("MemTotal:"), cgroup.map(|c| c.1)) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        };
        Room { available: field("MemAvailable:"), cgroup: cgroup.map(|c| c.0), total }
    }

    /// The bytes a build may take now (`None`: unknown, e.g. no /proc).
    pub fn free(&self) -> Option<u64> {
        let free = match (self.available, self.cgroup) {
            (Some(a), Some(c)) => a.min(c),
            (a, c) => a.or(c)?,
        };
        let margin = self.total.map_or(0, |t| (t / 10).min(512 << 20));
        Some(free.saturating_sub(margin))
    }

    fn describe(&self) -> String {
        let mb = |b: u64| b >> 20;
        let mut parts = Vec::new();
        if let Some(a) = self.available {
            parts.push(format!("MemAvailable {} MB", mb(a)));
        }
        if let Some(c) = self.cgroup {
            parts.push(format!("the cgroup's limit leaves {} MB", mb(c)));
        }
        match self.free() {
            Some(f) => format!("{} MB are available ({})", mb(f), parts.join(", ")),
            None => "the available memory is unknown".into(),
        }
    }
}

/// The cgroup (v2, else v1's memory controller) of this process: the room its limits leave
/// (the least over it and its ancestors) and the lowest limit. `None` without a limit.
fn cgroup_room() -> Option<(u64, u64)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |p: PathBuf| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    let stat = |p: PathBuf, key: &str| {
        read(p)?.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse::<u64>().ok()))
    };
    let mut best: Option<(u64, u64)> = None;
    let mut consider = |limit: Option<u64>, usage: Option<u64>, inactive_file: Option<u64>| {
        let (Some(limit), Some(usage)) = (limit, usage) else { return };
        if limit >= 1 << 60 {
            return;
        }
        let room = limit.saturating_sub(usage.saturating_sub(inactive_file.unwrap_or(0)));
        best = Some(best.map_or((room, limit), |(r, l)| (r.min(room), l.min(limit))));
    };
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let (root, v2) = match controllers {
            "" => (Path::new("/sys/fs/cgroup"), true),
            c if c.split(',').any(|c| c == "memory") => (Path::new("/sys/fs/cgroup/memory"), false),
            _ => continue,
        };
        let mut dir = root.join(path.trim_start_matches('/'));
        loop {
            if v2 {
                let limit = read(dir.join("memory.max")).and_then(|v| v.parse::<u64>().ok());
                let usage = read(dir.join("memory.current")).and_then(|v| v.parse::<u64>().ok());
                consider(limit, usage, stat(dir.join("memory.stat"), "inactive_file "));
            } else {
                let limit = read(dir.join("memory.limit_in_bytes")).and_then(|v| v.parse::<u64>().ok());
                let usage = read(dir.join("memory.usage_in_bytes")).and_then(|v| v.parse::<u64>().ok());
                consider(limit, usage, stat(dir.join("memory.stat"), "total_inactive_file "));
            }
            if dir == root || !dir.pop() || !dir.starts_with(root) {
                break;
            }
        }
    }
    best
}

/// The builds in progress of a server: a directory of lock-held files.
pub struct Ledger {
    dir: PathBuf,
}

/// An admitted build: its file, locked, removed when this is dropped (the build's end, an
/// error or a cancel).
pub struct Reservation {
    path: PathBuf,
    _file: File,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Ledger {
    /// The ledger in `dir` (created, owner-only, if it does not exist).
    pub fn open(dir: &Path) -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::shared(dir, e))?;
        Ok(Ledger { dir: dir.to_path_buf() })
    }

    /// The builds in progress (their processes alive and building); removes the files of
    /// ended ones.
    pub fn held(&self) -> Result<Vec<Held>> {
        let mut held = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| Error::shared(&self.dir, e))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".build") {
                continue;
            }
            let Ok(file) = File::open(entry.path()) else { continue };
            match super::file::lock(&file, libc::LOCK_SH | libc::LOCK_NB) {
                // Nobody holds it: its build ended without removing it (killed).
                Ok(()) => {
                    let _ = std::fs::remove_file(entry.path());
                }
                Err(_) => {
                    if let Ok(h) = serde_json::from_reader::<_, Held>(&file) {
                        held.push(h);
                    }
                }
            }
        }
        held.sort_by_key(|h| h.pid);
        Ok(held)
    }

    /// Admits `request` when it fits, waiting (and calling `interrupt`) up to its wait;
    /// `room` says what the machine gives (called at each try).
    pub fn admit(&self, request: &Request, room: &dyn Fn() -> Room, interrupt: &dyn Fn() -> Result<()>) -> Result<Reservation> {
        let started = Instant::now();
        loop {
            let (fits, refusal) = self.try_admit(request, &room())?;
            if let Some(reservation) = fits {
                return Ok(reservation);
            }
            let (never, message) = refusal.unwrap_or_default();
            if never || started.elapsed() >= request.wait {
                let (room, held) = message;
                return Err(Error::BuildingMemory {
                    what: request.what.to_string(),
                    need_mb: request.need.div_ceil(1 << 20),
                    room,
                    held,
                    waited_s: started.elapsed().as_secs_f64(),
                });
            }
            interrupt()?;
            std::thread::sleep(Duration::from_millis(100).min(request.wait.saturating_sub(started.elapsed())));
        }
    }

    /// One try: the reservation, or whether it can never fit and the figures of why not.
    #[allow(clippy::type_complexity)]
    fn try_admit(&self, request: &Request, room: &Room) -> Result<(Option<Reservation>, Option<(bool, (String, String))>)> {
        let decide_path = self.dir.join("decide.lock");
        let decide = File::options().create(true).truncate(false).write(true).open(&decide_path).map_err(|e| Error::shared(&decide_path, e))?;
        super::file::lock(&decide, libc::LOCK_EX).map_err(|e| Error::shared(&decide_path, e))?;
        let held = self.held()?;
        let others: u64 = held.iter().map(|h| h.bytes).sum();
        let mb = |b: u64| b >> 20;
        let within_limit = request.limit.is_none_or(|l| others.saturating_add(request.need) <= l);
        let within_room = room.free().is_none_or(|f| others.saturating_add(request.need) <= f);
        let never = request.limit.is_some_and(|l| request.need > l) || room.total.is_some_and(|t| request.need > t);
        if within_limit && within_room && !never {
            return Ok((Some(self.record(request)?), None));
        }
        let mut room_text = room.describe();
        if let Some(l) = request.limit {
            room_text.push_str(&format!("; pg_embed.max_building_memory is {} MB", mb(l)));
        }
        if let Some(t) = room.total.filter(|t| request.need > *t) {
            room_text.push_str(&format!("; the machine (or its cgroup) has {} MB in all", mb(t)));
        }
        let held_text = if held.is_empty() {
            "; no other build is in progress".to_string()
        } else {
            let list: Vec<String> = held.iter().map(|h| format!("{} (pid {}, {} MB)", h.what, h.pid, mb(h.bytes))).collect();
            format!("; {} MB are held by {} build(s) in progress: {}", mb(others), held.len(), list.join(", "))
        };
        Ok((None, Some((never, (room_text, held_text)))))
    }

    /// Records an admitted build: its file written under a temporary name, locked, then
    /// renamed into the ledger (so no reader sees it unlocked).
    fn record(&self, request: &Request) -> Result<Reservation> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stem = format!("{}-{n}", std::process::id());
        let (tmp, path) = (self.dir.join(format!("{stem}.tmp")), self.dir.join(format!("{stem}.build")));
        let held = Held { pid: std::process::id(), bytes: request.need, what: request.what.to_string() };
        let file = File::create(&tmp).map_err(|e| Error::shared(&tmp, e))?;
        super::file::lock(&file, libc::LOCK_EX).map_err(|e| Error::shared(&tmp, e))?;
        let json = serde_json::to_vec(&held).map_err(|e| Error::shared(&tmp, std::io::Error::other(e)))?;
        std::os::unix::fs::FileExt::write_all_at(&file, &json, 0).map_err(|e| Error::shared(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::shared(&path, e))?;
        Ok(Reservation { path, _file: file })
    }
}

/// Bytes a build holds outside mapped files at its peak, from the safetensors headers of
/// the model folder `dir`: with `shared`, one tensor's working memory (twice the largest
/// tensor as float32: as read, and as converted) and 64 MB for everything else; without,
/// the whole model in `precision` as well.
pub fn need(dir: &Path, precision: crate::options::Precision, shared: bool) -> Result<u64> {
    let working = crate::weights::largest_tensor_bytes(dir)?.saturating_mul(2).saturating_add(64 << 20);
    if shared {
        Ok(working)
    } else {
        Ok(working.saturating_add(crate::weights::prepared_bytes(dir, precision)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(name: &str) -> (PathBuf, Ledger) {
        let dir = std::env::temp_dir().join(format!("pg_embed_budget_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (dir.clone(), Ledger::open(&dir).unwrap())
    }

    fn request(need_mb: u64, limit_mb: Option<u64>, wait_ms: u64) -> Request<'static> {
        Request { what: "model \"m\"", need: need_mb << 20, limit: limit_mb.map(|l| l << 20), wait: Duration::from_millis(wait_ms) }
    }

    const PLENTY: Room = Room { available: Some(64 << 30), cgroup: None, total: Some(64 << 30) };

    #[test]
    fn builds_take_turns_within_the_limit() {
        let (dir, ledger) = ledger("turns");
        let first = ledger.admit(&request(600, Some(1000), 0), &|| PLENTY, &|| Ok(())).unwrap();
        assert_eq!(ledger.held().unwrap().iter().map(|h| h.bytes >> 20).collect::<Vec<_>>(), vec![600]);
        // A second one does not fit beside it: refused at once with wait 0, with the figures.
        let err = ledger.admit(&request(600, Some(1000), 0), &|| PLENTY, &|| Ok(())).err().unwrap();
        let text = err.to_string();
        assert!(text.contains("needs 600 MB") && text.contains("max_building_memory is 1000 MB") && text.contains("600 MB are held by 1 build"), "{text}");
        assert_eq!(err.sqlstate(), crate::error::SqlState::OutOfMemory);
        // With a wait, it is admitted once the first ends.
        std::thread::scope(|s| {
            let waiter = s.spawn(|| ledger.admit(&request(600, Some(1000), 5_000), &|| PLENTY, &|| Ok(())).map(|_| ()));
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
            waiter.join().unwrap().unwrap();
        });
        // A cancel ends the wait with the interrupt's error.
        let _held = ledger.admit(&request(600, Some(1000), 0), &|| PLENTY, &|| Ok(())).unwrap();
        let cancelled = ledger.admit(&request(600, Some(1000), 60_000), &|| PLENTY, &|| Err(Error::Cancelled));
        assert!(matches!(cancelled, Err(Error::Cancelled)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_machine_and_never_fitting() {
        let (dir, ledger) = ledger("room");
        // 2 GB available, a tenth of 8 GB (capped at 512 MB) kept back: 1.5 GB room.
        let room = || Room { available: Some(2 << 30), cgroup: None, total: Some(8 << 30) };
        assert_eq!(room().free(), Some((2 << 30) - (512 << 20)));
        let a = ledger.admit(&request(1000, None, 0), &room, &|| Ok(())).unwrap();
        let err = ledger.admit(&request(1000, None, 0), &room, &|| Ok(())).err().unwrap().to_string();
        assert!(err.contains("1536 MB are available (MemAvailable 2048 MB)"), "{err}");
        drop(a);
        // The cgroup's room counts when it is lower.
        let tight = || Room { available: Some(2 << 30), cgroup: Some(600 << 20), total: Some(1 << 30) };
        let err = ledger.admit(&request(1000, None, 0), &tight, &|| Ok(())).err().unwrap().to_string();
        assert!(err.contains("cgroup's limit leaves 600 MB"), "{err}");
        // More than the machine has, or than the limit: refused without waiting out the wait.
        let started = Instant::now();
        let err = ledger.admit(&request(10_000, None, 60_000), &tight, &|| Ok(())).err().unwrap().to_string();
        assert!(err.contains("has 1024 MB in all") && started.elapsed() < Duration::from_secs(5), "{err}");
        let err = ledger.admit(&request(700, Some(500), 60_000), &|| PLENTY, &|| Ok(())).err().unwrap().to_string();
        assert!(err.contains("max_building_memory is 500 MB") && started.elapsed() < Duration::from_secs(5), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_ended_builder_holds_nothing() {
        let (dir, ledger) = ledger("ended");
        // A build's file whose process is gone: present, but unlocked.
        std::fs::write(dir.join("999999-0.build"), br#"{"pid": 999999, "bytes": 1099511627776, "what": "x"}"#).unwrap();
        assert!(ledger.held().unwrap().is_empty());
        assert!(!dir.join("999999-0.build").exists(), "removed");
        ledger.admit(&request(600, Some(1000), 0), &|| PLENTY, &|| Ok(())).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
