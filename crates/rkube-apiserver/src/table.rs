//! table (to be written).
