//! Resolving a model `source` to a directory inside `pg_embed.model_dir`.
//!
//! Security boundary: whatever the source says (relative path, `..`, absolute path,
//! symlinks), the directory that is finally read must lie inside the canonical
//! model directory, and so must every file under it, links followed: a link inside a
//! model folder (`tokenizer.json -> /etc/...`) may not reach outside either. The check
//! runs at registration and again at every load, so a symlink swapped in later is
//! refused too.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub fn resolve(model_dir: &str, source: &str) -> Result<PathBuf> {
    if model_dir.is_empty() {
        return Err(Error::ModelDirNotSet);
    }
    if source.trim().is_empty() {
        return Err(Error::InvalidSource { source_name: source.into(), reason: "it is empty".into() });
    }
    let root = Path::new(model_dir)
        .canonicalize()
        .map_err(|e| Error::ModelDirInvalid { model_dir: model_dir.into(), message: e.to_string() })?;
    let candidate = root.join(source);
    let resolved = match candidate.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Do not tell whether a path outside the model directory exists.
            if !lexically_inside(&root, &candidate) {
                return Err(outside(source));
            }
            return Err(Error::SourceNotFound { source_name: source.into() });
        }
        Err(e) => return Err(Error::io(candidate, e)),
    };
    if !resolved.starts_with(&root) || resolved == root {
        return Err(outside(source));
    }
    if !resolved.is_dir() {
        return Err(Error::InvalidSource {
            source_name: source.into(),
            reason: "it is not a directory".into(),
        });
    }
    crate::files::files_under(&resolved, admit_inside(&root, "model file"))?;
    Ok(resolved)
}

/// An `admit` check for [`crate::files::files_under`]: the entry, links followed, lies inside
/// the canonical directory `root`; else it is refused as `what`, named relative to `root`.
pub fn admit_inside<'a>(root: &'a Path, what: &'static str) -> impl Fn(&Path) -> Result<()> + 'a {
    move |path: &Path| {
        let real = path.canonicalize().map_err(|e| Error::io(path, e))?;
        if real.starts_with(root) {
            return Ok(());
        }
        let name = path.strip_prefix(root).unwrap_or(path);
        Err(Error::SourceOutsideModelDir { what, source_name: name.display().to_string() })
    }
}

fn outside(source: &str) -> Error {
    Error::SourceOutsideModelDir { what: "model source", source_name: source.into() }
}

/// Resolves a file named in the options (`what`, e.g. a head file), relative to the
/// model directory `base`; the file finally read must lie inside `root`.
pub fn resolve_file(root: &Path, base: &Path, name: &str, what: &'static str) -> Result<PathBuf> {
    let refuse = || Error::SourceOutsideModelDir { what, source_name: name.into() };
    let root = root.canonicalize().map_err(|e| Error::io(root, e))?;
    // Compared with the canonical root, so the base is made canonical too.
    let candidate = base.canonicalize().unwrap_or_else(|_| base.to_path_buf()).join(name);
    let resolved = match candidate.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !lexically_inside(&root, &candidate) {
                return Err(refuse());
            }
            return Err(Error::MissingFile { path: candidate });
        }
        Err(e) => return Err(Error::io(candidate, e)),
    };
    if !resolved.starts_with(&root) {
        return Err(refuse());
    }
    if !resolved.is_file() {
        return Err(Error::InvalidOptions(format!("{what} \"{name}\" is not a file")));
    }
    Ok(resolved)
}

/// Whether `path` stays under `root` when read without touching the file system.
fn lexically_inside(root: &Path, path: &Path) -> bool {
    use std::path::Component;
    let mut depth: Vec<Component> = Vec::new();
    for c in path.strip_prefix(root).map(|p| p.components()).into_iter().flatten() {
        match c {
            Component::ParentDir => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            Component::CurDir => {}
            Component::Normal(_) => depth.push(c),
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    path.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> (PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!("pg_embed_source_{}", std::process::id()));
        let models = base.join("models");
        fs::create_dir_all(models.join("m1")).unwrap();
        fs::create_dir_all(base.join("secret")).unwrap();
        fs::write(models.join("file.txt"), "x").unwrap();
        let link = models.join("escape");
        if fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(base.join("secret"), &link).unwrap();
        }
        let inner = models.join("inner");
        if fs::symlink_metadata(&inner).is_err() {
            std::os::unix::fs::symlink(models.join("m1"), &inner).unwrap();
        }
        // Model folders whose files or sub-folders link outside, and one linking inside.
        fs::create_dir_all(models.join("leaky_file")).unwrap();
        fs::create_dir_all(models.join("leaky_dir")).unwrap();
        fs::create_dir_all(models.join("shared_file")).unwrap();
        fs::write(base.join("secret/tokenizer.json"), "{}").unwrap();
        for (link, target) in [
            (models.join("leaky_file/tokenizer.json"), base.join("secret/tokenizer.json")),
            (models.join("leaky_dir/1_Pooling"), base.join("secret")),
            (models.join("shared_file/tokenizer.json"), models.join("file.txt")),
        ] {
            if fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(target, &link).unwrap();
            }
        }
        (base, models)
    }

    #[test]
    fn resolves_inside_and_refuses_escapes() {
        let (base, models) = tree();
        let dir = models.to_str().unwrap();
        let m1 = models.canonicalize().unwrap().join("m1");
        assert_eq!(resolve(dir, "m1").unwrap(), m1);
        assert_eq!(resolve(dir, "./m1/").unwrap(), m1);
        assert_eq!(resolve(dir, "inner").unwrap(), m1, "a symlink that stays inside is fine");
        assert_eq!(resolve(dir, m1.to_str().unwrap()).unwrap(), m1, "absolute inside is fine");

        for bad in ["../secret", "escape", "m1/../../secret", "/etc", ".", "m1/../..", "../nope"] {
            let err = resolve(dir, bad).unwrap_err();
            assert!(matches!(err, Error::SourceOutsideModelDir { .. }), "{bad}: {err}");
        }
        assert!(matches!(resolve(dir, "nope").unwrap_err(), Error::SourceNotFound { .. }));
        // Files and folders inside a model folder that link outside model_dir.
        for (bad, named) in
            [("leaky_file", "leaky_file/tokenizer.json"), ("leaky_dir", "leaky_dir/1_Pooling")]
        {
            match resolve(dir, bad).unwrap_err() {
                Error::SourceOutsideModelDir { what: "model file", source_name } => {
                    assert_eq!(source_name, named)
                }
                err => panic!("{bad}: {err}"),
            }
        }
        assert!(resolve(dir, "shared_file").is_ok(), "a link to a file inside model_dir is fine");

        let root = models.canonicalize().unwrap();
        let file = |name: &str| resolve_file(&root, &m1, name, "head file");
        fs::write(m1.join("head.safetensors"), "x").unwrap();
        fs::write(base.join("secret/head.safetensors"), "x").unwrap();
        assert_eq!(file("head.safetensors").unwrap(), m1.join("head.safetensors"));
        assert_eq!(file("../file.txt").unwrap(), root.join("file.txt"), "shared files inside model_dir");
        for bad in ["../../secret/head.safetensors", "../escape/head.safetensors", "/etc/passwd", "../../x"] {
            let err = file(bad).unwrap_err();
            assert!(matches!(err, Error::SourceOutsideModelDir { what: "head file", .. }), "{bad}: {err}");
        }
        assert!(matches!(file("absent.safetensors").unwrap_err(), Error::MissingFile { .. }));
        assert!(matches!(file(".").unwrap_err(), Error::InvalidOptions(_)));
        assert!(matches!(resolve(dir, "file.txt").unwrap_err(), Error::InvalidSource { .. }));
        assert!(matches!(resolve(dir, " ").unwrap_err(), Error::InvalidSource { .. }));
        assert!(matches!(resolve("", "m1").unwrap_err(), Error::ModelDirNotSet));
        assert!(matches!(
            resolve(base.join("absent").to_str().unwrap(), "m1").unwrap_err(),
            Error::ModelDirInvalid { .. }
        ));
    }
}
