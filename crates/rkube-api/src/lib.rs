//! rkube-api (to be written).
