//! The experiment runner (being written).
