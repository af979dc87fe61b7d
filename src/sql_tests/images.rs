//! `#[pg_test]`s of the image functions: embed_image, classify_image(_labels), and their
//! errors (tests/regress/sql/70_images.sql runs the whole suite against a server).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::sql_tests::{register_with, use_fixtures};

    fn image(file: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/images/inputs/{file}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn golden(model: &str, file: &str, key: &str) -> Vec<f32> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/images/golden.json");
        let g: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        serde_json::from_value(g["models"][model]["images"][file]["outputs"][key].clone()).unwrap()
    }

    fn embed_image_sql(model: &str, bytes: Vec<u8>) -> Vec<f32> {
        Spi::get_one_with_args::<Vec<f32>>("SELECT embed_image($1, $2)", &[model.into(), bytes.into()])
            .unwrap()
            .unwrap()
    }

    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    #[pg_test]
    fn embed_image_is_transformers_features() {
        use_fixtures();
        let info = register_with("vit", "images/vit", "{}");
        assert_eq!(info["modality"], "image");
        assert_eq!(info["pooling"], serde_json::json!(["cls"]));
        let got = embed_image_sql("vit", image("exact_32x32.png"));
        assert!(max_abs_diff(&got, &golden("vit", "exact_32x32.png", "cls")) <= 1e-4);
        let modality =
            Spi::get_one::<String>("SELECT modality FROM embed.models WHERE name = 'vit'").unwrap();
        assert_eq!(modality.as_deref(), Some("image"));
    }

    #[pg_test]
    fn classify_image_labels_are_best_first() {
        use_fixtures();
        register_with("vitc", "images/vit_classify", "{}");
        let logits = Spi::get_one_with_args::<Vec<f32>>(
            "SELECT classify_image('vitc', $1)",
            &[image("exact_32x32.png").into()],
        )
        .unwrap()
        .unwrap();
        assert!(max_abs_diff(&logits, &golden("vit_classify", "exact_32x32.png", "logits")) <= 1e-4);
        let scores: Vec<f32> = Spi::connect(|c| {
            c.select(
                "SELECT score FROM classify_image_labels('vitc', $1)",
                None,
                &[image("exact_32x32.png").into()],
            )
            .unwrap()
            .map(|r| r.get::<f32>(1).unwrap().unwrap())
            .collect()
        });
        assert_eq!(scores.len(), 3);
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
        assert!((scores.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }

    #[pg_test(error = "this model takes images, not text")]
    fn embed_text_with_an_image_model() {
        use_fixtures();
        register_with("vit", "images/vit", "{}");
        Spi::run("SELECT embed('vit', 'a photo')").unwrap();
    }

    #[pg_test(error = "this model takes text, not images")]
    fn embed_image_with_a_text_model() {
        use_fixtures();
        register_with("mean", "pool_mean", "{}");
        embed_image_sql("mean", image("exact_32x32.png"));
    }

    #[pg_test(error = "image of 300x200 pixels is larger than pg_embed.max_image_pixels (100 pixels)")]
    fn image_over_the_pixel_limit() {
        use_fixtures();
        register_with("vit", "images/vit", "{}");
        Spi::run("SET LOCAL pg_embed.max_image_pixels = 100").unwrap();
        embed_image_sql("vit", image("large_300x200.png"));
    }
}
