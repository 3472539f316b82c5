//! rkube-cache (to be written).
