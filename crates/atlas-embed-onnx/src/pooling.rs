//! Pooling: one vector per text from a model's token vectors (mean, first token, last token),
//! scaled to unit length, as sentence-transformers' Pooling and Normalize modules compute it.

use serde::Deserialize;

/// How a text's token vectors become its vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The mean of the tokens the attention mask keeps (MiniLM, mpnet, e5, nomic, gte).
    Mean,
    /// The first token, `[CLS]` (bge, arctic-embed).
    Cls,
    /// The last token the mask keeps (decoder models: Qwen3-Embedding, e5-mistral).
    #[serde(alias = "last-token", alias = "lasttoken")]
    LastToken,
}

impl Pooling {
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::LastToken => "last_token",
        }
    }

    /// One text's vector from its `hidden` token vectors (`mask.len()` rows of `dim`), unit
    /// length (all zeros only when no token is kept and the model gave zeros).
    pub fn pool(self, hidden: &[f32], mask: &[i64], dim: usize) -> Vec<f32> {
        let tokens = || hidden.chunks_exact(dim).zip(mask);
        let mut vector = match self {
            Pooling::Mean => {
                let mut sum = vec![0f32; dim];
                let mut count = 0f32;
                for (token, _) in tokens().filter(|(_, m)| **m != 0) {
                    sum.iter_mut().zip(token).for_each(|(s, x)| *s += x);
                    count += 1.0;
                }
                let count = count.max(1.0);
                sum.iter_mut().for_each(|s| *s /= count);
                sum
            }
            Pooling::Cls => hidden.get(..dim).map_or_else(|| vec![0.0; dim], <[f32]>::to_vec),
            Pooling::LastToken => {
                let last = tokens().rfind(|(_, m)| **m != 0).map(|(token, _)| token);
                last.map_or_else(|| vec![0.0; dim], <[f32]>::to_vec)
            }
        };
        normalize(&mut vector);
        vector
    }
}

/// A Matryoshka-trained model's `vector` cut to its first `width` dimensions, as such models are
/// trained to be read (nomic-embed-text-v1.5's card): layer norm over the whole vector (no
/// learnt scale or shift), the first `width` values, unit length. The training puts the most of
/// a text's meaning in the first dimensions only after centring, which is why the norm comes
/// before the cut. Layer norm ignores the vector's scale, so a pooled vector already of unit
/// length gives the same cut as the raw one. A `width` of the whole vector or more leaves it as
/// pooling gave it: the full-width vectors of a space stay what they were.
pub fn matryoshka_cut(vector: &[f32], width: usize) -> Vec<f32> {
    if width >= vector.len() {
        return vector.to_vec();
    }
    let n = vector.len() as f32;
    let mean = vector.iter().sum::<f32>() / n;
    let variance = vector.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
    // PyTorch's layer_norm default epsilon.
    let scale = 1.0 / (variance + 1e-5).sqrt();
    let mut cut: Vec<f32> = vector[..width].iter().map(|x| (x - mean) * scale).collect();
    normalize(&mut cut);
    cut
}

/// Scales `vector` to unit length (a zero vector stays zero).
pub fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    vector.iter_mut().for_each(|x| *x /= norm);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DIM: usize = 4;

    fn unit(v: &[f32]) -> bool {
        (v.iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() < 1e-4
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]

        /// Every pooling gives a unit vector of the model's dimension, and padding (tokens the
        /// mask drops, whatever they hold) changes nothing.
        #[test]
        fn pooled_vectors_are_unit_and_ignore_padding(
            kept in proptest::collection::vec(proptest::collection::vec(0.5f32..2.0, DIM), 1..8),
            padding in proptest::collection::vec(proptest::collection::vec(-100f32..100.0, DIM), 0..4),
        ) {
            let hidden: Vec<f32> = kept.iter().flatten().copied().collect();
            let mask = vec![1i64; kept.len()];
            let padded: Vec<f32> = kept.iter().chain(&padding).flatten().copied().collect();
            let padded_mask: Vec<i64> = mask.iter().copied().chain(padding.iter().map(|_| 0)).collect();
            for pooling in [Pooling::Mean, Pooling::Cls, Pooling::LastToken] {
                let v = pooling.pool(&hidden, &mask, DIM);
                prop_assert_eq!(v.len(), DIM);
                prop_assert!(unit(&v), "{:?}: {:?}", pooling, v);
                prop_assert_eq!(pooling.pool(&padded, &padded_mask, DIM), v);
            }
        }

        /// The first and last token poolings are those tokens' directions.
        #[test]
        fn cls_and_last_token_take_their_token(
            kept in proptest::collection::vec(proptest::collection::vec(0.5f32..2.0, DIM), 1..8),
        ) {
            let hidden: Vec<f32> = kept.iter().flatten().copied().collect();
            let mask = vec![1i64; kept.len()];
            let mut first = kept[0].clone();
            normalize(&mut first);
            let mut last = kept[kept.len() - 1].clone();
            normalize(&mut last);
            prop_assert_eq!(Pooling::Cls.pool(&hidden, &mask, DIM), first);
            prop_assert_eq!(Pooling::LastToken.pool(&hidden, &mask, DIM), last);
        }

        /// A Matryoshka cut has the width asked for and unit length, reads the vector's
        /// direction only (any positive scale gives the same cut), and leaves a vector alone
        /// at its own width.
        #[test]
        fn a_matryoshka_cut_is_unit_at_its_width_and_ignores_scale(
            vector in proptest::collection::vec(-1f32..1.0, 8..32),
            width in 1usize..40,
            scale in 0.01f32..100.0,
        ) {
            prop_assume!(vector.iter().any(|x| (x - vector[0]).abs() > 1e-3));
            let cut = matryoshka_cut(&vector, width);
            prop_assert_eq!(cut.len(), width.min(vector.len()));
            if width >= vector.len() {
                prop_assert_eq!(&cut, &vector);
            } else if cut.iter().any(|x| x.abs() > 1e-3) {
                prop_assert!(unit(&cut), "{:?}", cut);
                let scaled: Vec<f32> = vector.iter().map(|x| x * scale).collect();
                let rescaled = matryoshka_cut(&scaled, width);
                let cosine: f32 = cut.iter().zip(&rescaled).map(|(a, b)| a * b).sum();
                prop_assert!(cosine > 0.9999, "cosine {}", cosine);
            }
        }
    }

    /// The card's recipe by hand: centred by the whole vector's mean, divided by its deviation,
    /// then the first two values at unit length.
    #[test]
    fn a_matryoshka_cut_centres_on_the_whole_vector_before_cutting() {
        // mean 2.5; centred: -1.5, -0.5, 0.5, 1.5; the first two at unit length: -0.949, -0.316.
        let cut = matryoshka_cut(&[1.0, 2.0, 3.0, 4.0], 2);
        let expected = [-1.5 / 2.5f32.sqrt(), -0.5 / 2.5f32.sqrt()];
        assert!(cut.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-5), "{cut:?}");
    }

    #[test]
    fn mean_pooling_ignores_padding_and_normalises() {
        let hidden = [1.0, 0.0, 3.0, 0.0, 100.0, 100.0];
        let v = Pooling::Mean.pool(&hidden, &[1, 1, 0], 2);
        assert!((v[0] - 1.0).abs() < 1e-6 && v[1].abs() < 1e-6, "{v:?}");
    }

    #[test]
    fn names_read_as_sentence_transformers_and_atlas_write_them() {
        for (text, pooling) in [("mean", Pooling::Mean), ("cls", Pooling::Cls), ("last-token", Pooling::LastToken)] {
            let parsed: Pooling = serde_json::from_str(&format!("{text:?}")).unwrap();
            assert_eq!(parsed, pooling);
        }
        assert_eq!(Pooling::LastToken.as_str(), "last_token");
    }
}
