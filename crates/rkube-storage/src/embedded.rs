//! Embedded MVCC store on redb (to be written).
