//! Model sources `hf:org/name[@revision]`, resolved in a Hugging Face hub cache laid out as
//! huggingface_hub and the hf-hub crate lay it out:
//!
//! ```text
//! <cache>/models--org--name/refs/<branch or tag>      the commit it points at
//!                          /snapshots/<commit>/...    the files (links into blobs/)
//!                          /blobs/<hash>
//! ```
//!
//! Registration pins the commit and the sha256 of every file of the snapshot; each load
//! verifies them, so a changed file is refused instead of giving different vectors. Nothing
//! from the repository is executed: only configs, tokenizers and safetensors weights are read.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use hf_hub::{Repo, RepoType};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// A parsed `hf:` source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSource {
    /// `org/name` (or a legacy `name` without an organisation).
    pub repo: String,
    /// A branch, tag or commit; `main` when the source names none.
    pub revision: String,
}

/// What a registration pins: the commit and the sha256 of each file of its snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub commit: String,
    pub files: BTreeMap<String, String>,
}

/// A snapshot found in the cache.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// `<cache>/models--org--name`: every file read must lie inside it.
    pub repo_dir: PathBuf,
    /// `<repo_dir>/snapshots/<commit>`.
    pub dir: PathBuf,
    /// The 40-hex commit the revision resolved to.
    pub commit: String,
}

impl HubSource {
    /// `Some` for a source that starts with `hf:`, `None` for any other source.
    pub fn parse(source: &str) -> Option<Result<HubSource>> {
        let rest = source.strip_prefix("hf:")?;
        let (repo, revision) = match rest.split_once('@') {
            Some((repo, revision)) => (repo, revision),
            None => (rest, "main"),
        };
        let invalid = |reason: String| Error::InvalidSource { source_name: source.into(), reason };
        let segments: Vec<&str> = repo.split('/').collect();
        if segments.is_empty() || segments.len() > 2 || !segments.iter().all(|s| valid_segment(s)) {
            return Some(Err(invalid(format!(
                "\"{repo}\" is not a Hugging Face repository id (org/name: letters, digits, '-', '_', '.', not starting with '.' or '-')"
            ))));
        }
        let revision_ok = !revision.is_empty()
            && revision.len() <= 256
            && revision.split('/').all(valid_segment)
            && revision.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        if !revision_ok {
            return Some(Err(invalid(format!(
                "\"{revision}\" is not a valid revision (a branch, tag or commit)"
            ))));
        }
        Some(Ok(HubSource { repo: repo.into(), revision: revision.into() }))
    }

    /// The snapshot of this source's revision in `cache`.
    pub fn find(&self, cache: &Path) -> Result<Snapshot> {
        let missing = || Error::NotInHubCache {
            repo: self.repo.clone(),
            revision: self.revision.clone(),
            cache: cache.to_path_buf(),
        };
        let folder =
            Repo::with_revision(self.repo.clone(), RepoType::Model, self.revision.clone()).folder_name();
        let repo_dir = cache.join(folder);
        let commit = if is_commit(&self.revision) {
            self.revision.clone()
        } else {
            let ref_path = repo_dir.join("refs").join(&self.revision);
            let text = std::fs::read_to_string(&ref_path).map_err(|_| missing())?;
            let commit = text.trim().to_string();
            if !is_commit(&commit) {
                return Err(Error::invalid_file(ref_path, format!("\"{commit}\" is not a commit hash")));
            }
            commit
        };
        let dir = repo_dir.join("snapshots").join(&commit);
        if !dir.is_dir() {
            return Err(missing());
        }
        let repo_dir = repo_dir.canonicalize().map_err(|e| Error::io(&repo_dir, e))?;
        let dir = dir.canonicalize().map_err(|e| Error::io(&dir, e))?;
        if !dir.starts_with(&repo_dir) {
            return Err(Error::SourceOutsideModelDir {
                what: "hub snapshot",
                source_name: dir.display().to_string(),
            });
        }
        Ok(Snapshot { repo_dir, dir, commit })
    }
}

/// Files a download fetches: configs, tokenizers and safetensors weights. Code (`*.py`),
/// pickled weights and other formats are never fetched.
fn wanted(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    let top = file.split('/').next().unwrap_or(file);
    !["onnx", "openvino", "coreml", "tf", "flax"].contains(&top)
        && (name.ends_with(".json")
            || name.ends_with(".safetensors")
            || name.ends_with(".txt")
            || name.ends_with(".model"))
}

/// Downloads the files of `source` that pg_embed reads into `cache` (pg_embed.allow_download;
/// `HF_ENDPOINT` and `HF_TOKEN` / the cache's token file of the server's OS user apply), then
/// finds the snapshot. Blocking: a download cannot be cancelled half-way.
pub fn download(cache: &Path, source: &HubSource) -> Result<Snapshot> {
    let failed = |message: String| Error::HubDownload { repo: source.repo.clone(), message };
    let mut builder = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cache.to_path_buf()))
        .with_progress(false);
    if let Some(endpoint) = std::env::var_os("HF_ENDPOINT").and_then(|e| e.into_string().ok()) {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(token) = std::env::var_os("HF_TOKEN").and_then(|e| e.into_string().ok()) {
        builder = builder.with_token(Some(token));
    }
    let api = builder.build().map_err(|e| failed(e.to_string()))?;
    let repo = api.repo(Repo::with_revision(source.repo.clone(), RepoType::Model, source.revision.clone()));
    let info = repo.info().map_err(|e| failed(e.to_string()))?;
    for file in info.siblings.iter().map(|s| s.rfilename.as_str()).filter(|f| wanted(f)) {
        repo.get(file).map_err(|e| failed(format!("{file}: {e}")))?;
    }
    HubSource { repo: source.repo.clone(), revision: info.sha }.find(cache)
}

fn valid_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && !s.starts_with(['.', '-'])
        && !s.contains("..")
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// The hub cache directory: `pg_embed.hf_cache` if set, else `HF_HUB_CACHE`, else
/// `HF_HOME/hub`, else `~/.cache/huggingface/hub` of the server's OS user.
pub fn cache_dir(setting: &str) -> Result<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if !setting.is_empty() {
        return Ok(PathBuf::from(setting));
    }
    env("HF_HUB_CACHE")
        .or_else(|| env("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| env("HOME").map(|h| h.join(".cache/huggingface/hub")))
        .ok_or_else(|| Error::InvalidOptions("no Hugging Face cache: set pg_embed.hf_cache".into()))
}

/// sha256 (hex) of every file under `dir`, by path relative to it, links followed; every
/// file must lie inside `root`.
pub fn digests(root: &Path, dir: &Path) -> Result<BTreeMap<String, String>> {
    crate::files::files_under(dir, crate::source::admit_inside(root, "hub file"))?
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
            Ok((name, sha256_file(&path)?))
        })
        .collect()
}

/// Checks the files under `dir` against the digests recorded at registration: a changed,
/// missing or added file is an error.
pub fn verify(root: &Path, dir: &Path, expected: &BTreeMap<String, String>) -> Result<()> {
    verify_digests(dir, &digests(root, dir)?, expected)
}

/// As [`verify`], with the files' digests already computed (`actual`, by path relative to
/// `dir`).
pub fn verify_digests(dir: &Path, actual: &BTreeMap<String, String>, expected: &BTreeMap<String, String>) -> Result<()> {
    for (name, want) in expected {
        match actual.get(name) {
            None => return Err(Error::MissingFile { path: dir.join(name) }),
            Some(got) if got != want => {
                return Err(Error::ChecksumMismatch {
                    path: dir.join(name),
                    expected: want.clone(),
                    actual: got.clone(),
                })
            }
            Some(_) => {}
        }
    }
    if let Some((name, got)) = actual.iter().find(|(name, _)| !expected.contains_key(*name)) {
        return Err(Error::ChecksumMismatch {
            path: dir.join(name),
            expected: "none (not registered)".into(),
            actual: got.clone(),
        });
    }
    Ok(())
}

pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    /// A cache as huggingface_hub lays it out: refs/main, a snapshot linking into blobs/.
    fn fake_cache(name: &str) -> PathBuf {
        let cache = std::env::temp_dir().join(format!("pg_embed_hub_{}_{name}", std::process::id()));
        let _ = fs::remove_dir_all(&cache);
        let repo = cache.join("models--org--tiny");
        fs::create_dir_all(repo.join("refs")).unwrap();
        fs::create_dir_all(repo.join("blobs")).unwrap();
        fs::create_dir_all(repo.join("snapshots").join(COMMIT).join("1_Pooling")).unwrap();
        fs::write(repo.join("refs/main"), COMMIT).unwrap();
        fs::write(repo.join("refs/v1"), format!("{COMMIT}\n")).unwrap();
        for (file, blob, text) in [("config.json", "b1", "{}"), ("1_Pooling/config.json", "b2", "[]")] {
            fs::write(repo.join("blobs").join(blob), text).unwrap();
            let link = repo.join("snapshots").join(COMMIT).join(file);
            let depth = if file.contains('/') { "../../../blobs/" } else { "../../blobs/" };
            std::os::unix::fs::symlink(format!("{depth}{blob}"), link).unwrap();
        }
        cache
    }

    /// A hub endpoint on localhost serving `files` of `org/tiny` at COMMIT, as the hub's HTTP
    /// API answers hf-hub (repo info; ranged file reads with etag and x-repo-commit
    /// headers). Returns its URL and the paths it was asked for.
    fn fake_endpoint(
        files: Vec<(String, Vec<u8>)>,
    ) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let (mut request, mut range) = (String::new(), 0usize);
                reader.read_line(&mut request).unwrap();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if line.trim().is_empty() {
                        break;
                    }
                    if let Some(r) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
                        range = r.trim().split('-').next().unwrap().parse().unwrap();
                    }
                }
                let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push(path.clone());
                let (status, headers, body) = if path == "/api/models/org/tiny/revision/main" {
                    let siblings: Vec<_> =
                        files.iter().map(|(f, _)| serde_json::json!({"rfilename": f})).collect();
                    let info = serde_json::json!({"sha": COMMIT, "siblings": siblings});
                    ("200 OK", String::new(), info.to_string().into_bytes())
                } else if let Some((_, bytes)) =
                    files.iter().find(|(f, _)| path == format!("/org/tiny/resolve/main/{f}"))
                {
                    let etag = format!("{:x}", Sha256::digest(bytes));
                    let headers = format!(
                        "etag: \"{etag}\"\r\nx-repo-commit: {COMMIT}\r\ncontent-range: bytes {range}-{}/{}\r\n",
                        bytes.len() - 1,
                        bytes.len()
                    );
                    ("206 Partial Content", headers, bytes[range..].to_vec())
                } else {
                    ("404 Not Found", String::new(), Vec::new())
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
            }
        });
        (url, asked)
    }

    /// With downloads allowed, a missing repository is fetched into the cache layout (only
    /// the files pg_embed reads), and then found, pinned and verified like any other.
    #[test]
    fn downloads_into_the_cache_layout() {
        let files = vec![
            ("config.json".to_string(), b"{\"a\": 1}".to_vec()),
            ("1_Pooling/config.json".to_string(), b"{}".to_vec()),
            ("model.safetensors".to_string(), vec![7u8; 3000]),
            ("modeling_evil.py".to_string(), b"import os".to_vec()),
            ("pytorch_model.bin".to_string(), vec![1u8; 10]),
        ];
        let (url, asked) = fake_endpoint(files.clone());
        let cache = std::env::temp_dir().join(format!("pg_embed_hub_{}_download", std::process::id()));
        let _ = fs::remove_dir_all(&cache);
        std::env::set_var("HF_ENDPOINT", &url);
        let source = HubSource::parse("hf:org/tiny").unwrap().unwrap();
        assert!(matches!(source.find(&cache), Err(Error::NotInHubCache { .. })));
        let snap = download(&cache, &source).unwrap();
        std::env::remove_var("HF_ENDPOINT");
        assert_eq!(snap.commit, COMMIT);
        let sums = digests(&snap.repo_dir, &snap.dir).unwrap();
        assert_eq!(
            sums.keys().collect::<Vec<_>>(),
            ["1_Pooling/config.json", "config.json", "model.safetensors"]
        );
        for (name, bytes) in &files[..3] {
            assert_eq!(fs::read(snap.dir.join(name)).unwrap(), *bytes, "{name}");
        }
        assert_eq!(source.find(&cache).unwrap().dir, snap.dir, "refs/main written");
        let asked = asked.lock().unwrap();
        assert!(!asked.iter().any(|p| p.ends_with(".py") || p.ends_with(".bin")), "{asked:?}");
        let _ = fs::remove_dir_all(&cache);
    }

    #[test]
    fn downloads_only_what_is_read() {
        for f in ["config.json", "model.safetensors", "1_Pooling/config.json", "vocab.txt", "spiece.model"] {
            assert!(wanted(f), "{f}");
        }
        for f in
            ["pytorch_model.bin", "modeling_custom.py", "onnx/model.onnx", "onnx/config.json", "tf_model.h5"]
        {
            assert!(!wanted(f), "{f}");
        }
    }

    #[test]
    fn parses_sources() {
        let p = |s: &str| HubSource::parse(s);
        assert!(p("all-MiniLM-L6-v2").is_none());
        assert_eq!(
            p("hf:org/m").unwrap().unwrap(),
            HubSource { repo: "org/m".into(), revision: "main".into() }
        );
        assert_eq!(p("hf:m@v1.0").unwrap().unwrap().revision, "v1.0");
        assert_eq!(p("hf:org/m@refs/pr/1").unwrap().unwrap().revision, "refs/pr/1");
        for bad in [
            "hf:",
            "hf:../x",
            "hf:org/../x",
            "hf:/etc/passwd",
            "hf:a/b/c",
            "hf:org/m@",
            "hf:org/m@../../x",
            "hf:org/.hidden",
            "hf:org/m@a b",
            "hf:org\\m",
            "hf:org/m@/abs",
        ] {
            assert!(matches!(p(bad), Some(Err(Error::InvalidSource { .. }))), "{bad}");
        }
    }

    #[test]
    fn finds_snapshots_by_ref_and_commit() {
        let cache = fake_cache("find");
        let find = |s: &str| HubSource::parse(s).unwrap().unwrap().find(&cache);
        let main = find("hf:org/tiny").unwrap();
        assert_eq!(main.commit, COMMIT);
        assert!(main.dir.ends_with(format!("snapshots/{COMMIT}")));
        assert_eq!(find("hf:org/tiny@v1").unwrap().commit, COMMIT);
        assert_eq!(find(&format!("hf:org/tiny@{COMMIT}")).unwrap().dir, main.dir);
        for absent in
            ["hf:org/other", "hf:org/tiny@v2", "hf:org/tiny@1111111111111111111111111111111111111111"]
        {
            assert!(matches!(find(absent), Err(Error::NotInHubCache { .. })), "{absent}");
        }
        fs::write(cache.join("models--org--tiny/refs/bad"), "not-a-commit").unwrap();
        assert!(matches!(find("hf:org/tiny@bad"), Err(Error::InvalidFile { .. })));
        let _ = fs::remove_dir_all(&cache);
    }

    #[test]
    fn digests_verify_and_catch_tampering() {
        let cache = fake_cache("digests");
        let snap = HubSource::parse("hf:org/tiny").unwrap().unwrap().find(&cache).unwrap();
        let sums = digests(&snap.repo_dir, &snap.dir).unwrap();
        assert_eq!(sums.keys().collect::<Vec<_>>(), ["1_Pooling/config.json", "config.json"]);
        // sha256("{}"), as `printf '{}' | sha256sum` prints it.
        assert_eq!(sums["config.json"], "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
        verify(&snap.repo_dir, &snap.dir, &sums).unwrap();

        fs::write(snap.repo_dir.join("blobs/b1"), "{\"x\": 1}").unwrap();
        let err = verify(&snap.repo_dir, &snap.dir, &sums).unwrap_err();
        assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
        assert!(err.to_string().contains("config.json"), "{err}");

        fs::write(snap.repo_dir.join("blobs/b1"), "{}").unwrap();
        fs::write(snap.dir.join("extra.safetensors"), "x").unwrap();
        assert!(matches!(verify(&snap.repo_dir, &snap.dir, &sums), Err(Error::ChecksumMismatch { .. })));
        fs::remove_file(snap.dir.join("extra.safetensors")).unwrap();
        fs::remove_file(snap.dir.join("config.json")).unwrap();
        assert!(matches!(verify(&snap.repo_dir, &snap.dir, &sums), Err(Error::MissingFile { .. })));

        // A link out of the repository is refused.
        std::os::unix::fs::symlink("/etc/hostname", snap.dir.join("escape.json")).unwrap();
        assert!(matches!(digests(&snap.repo_dir, &snap.dir), Err(Error::SourceOutsideModelDir { .. })));
        let _ = fs::remove_dir_all(&cache);
    }
}
