//! openapi (to be written).
