//! The engine's one PRNG lives with the data stage (which needs it for shuffling and
//! augmentation); weight init uses the same generator.

pub use crate::engine::data::Rng;
