//! Datasets and the loader (being written).
