//! What this version computes differently from the version before it for a folder some
//! registration may already use: the extension's upgrade names those registrations and
//! makes their calls fail until they are registered again, so that vectors stored from
//! the older computation are never silently mixed with different new ones.
//!
//! Each entry is a layout the older version read as something else; the check reads only
//! the files that tell the layout apart, never the weights.

use std::path::Path;

use crate::options::Options;

/// Why a registration of `dir` with `options`, made by pg_embed 0.6, must be made again
/// under this version; None when this version computes it as 0.6 did.
pub fn since_0_6(dir: &Path, options: &Options) -> Option<String> {
    if stanford_colbert(dir) {
        return Some(
            "pg_embed 0.6 read this Stanford ColBERT folder (HF_ColBERT) as a plain BERT embedder (mean pooling, \
             no projection); this version computes it as ColBERT, one vector per token (embed_multi)"
                .into(),
        );
    }
    if flag_bge_m3(dir) && options.pooling.is_none() {
        return Some(
            "pg_embed 0.6 computed this bge-m3 folder's dense output (embed, encode_all) as the unnormalized mean \
             of its token states; this version gives FlagEmbedding's, the [CLS] state normalized"
                .into(),
        );
    }
    if let Some(tasks) = peft_tasks(dir) {
        return Some(format!(
            "pg_embed 0.6 ignored this folder's LoRA task adapters ({tasks}) and computed the base model for every \
             prompt name; this version computes the adapter a call's task names (embed's third argument, the prompt option)"
        ));
    }
    None
}

/// The PEFT LoRA adapter folders beside the backbone (jina-embeddings-v3-hf's tasks), by
/// name; None when there are none.
fn peft_tasks(dir: &Path) -> Option<String> {
    let bdir = crate::st::Layout::read(dir).map_or_else(|_| dir.to_path_buf(), |l| l.backbone_dir);
    let folders = crate::lora::folders::peft_folders(&bdir).ok().filter(|f| !f.is_empty())?;
    Some(folders.into_iter().map(|(name, _)| name).collect::<Vec<_>>().join(", "))
}

/// The Stanford ColBERT layout (colbert-ir): config.json names the `HF_ColBERT`
/// architecture, or the folder holds ColBERT's `artifact.metadata`.
pub fn stanford_colbert(dir: &Path) -> bool {
    if dir.join("artifact.metadata").is_file() {
        return true;
    }
    let config: Option<serde_json::Value> =
        std::fs::read(dir.join("config.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    config
        .as_ref()
        .and_then(|c| c.get("architectures"))
        .and_then(|a| a.as_array())
        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("HF_ColBERT")))
}

/// bge-m3 as FlagEmbedding's trainer saves it: its two token heads beside the backbone and
/// no sentence-transformers modules.
pub fn flag_bge_m3(dir: &Path) -> bool {
    !dir.join("modules.json").exists()
        && dir.join("colbert_linear.pt").is_file()
        && dir.join("sparse_linear.pt").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("pg_embed_changes_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (file, text) in files {
            std::fs::write(d.join(file), text).unwrap();
        }
        d
    }

    #[test]
    fn the_changed_layouts_are_named_and_others_are_not() {
        let none = Options::default();
        let bert = folder("bert", &[("config.json", r#"{"architectures": ["BertModel"]}"#)]);
        assert_eq!(since_0_6(&bert, &none), None);
        let stanford = folder("stanford", &[("config.json", r#"{"architectures": ["HF_ColBERT"]}"#)]);
        assert!(since_0_6(&stanford, &none).unwrap().contains("Stanford ColBERT"));
        let metadata = folder("metadata", &[("config.json", "{}"), ("artifact.metadata", "{}")]);
        assert!(since_0_6(&metadata, &none).is_some());
        let m3 = folder("m3", &[("config.json", "{}"), ("colbert_linear.pt", ""), ("sparse_linear.pt", "")]);
        assert!(since_0_6(&m3, &none).unwrap().contains("[CLS]"));
        let peft = folder("peft", &[("config.json", "{}")]);
        std::fs::create_dir_all(peft.join("retrieval_query")).unwrap();
        std::fs::write(peft.join("retrieval_query/adapter_config.json"), "{}").unwrap();
        assert!(since_0_6(&peft, &none).unwrap().contains("LoRA task adapters (retrieval_query)"));
        // Options that chose the pooling keep what 0.6 computed with them.
        let mean = Options::from_json(&serde_json::json!({"pooling": "mean"})).unwrap();
        assert_eq!(since_0_6(&m3, &mean), None);
        // With sentence-transformers modules the folder's own Pooling decided, in 0.6 too.
        let st = folder(
            "m3_st",
            &[("config.json", "{}"), ("colbert_linear.pt", ""), ("sparse_linear.pt", ""), ("modules.json", "[]")],
        );
        assert_eq!(since_0_6(&st, &none), None);
        for d in [bert, stanford, metadata, m3, st] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
