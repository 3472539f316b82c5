//! Tests for rkube-api, one module per source module. Each test is named
//! after the upstream rule it proves and asserts what a client would see
//! (codes, reasons, exact messages, exact JSON / token bytes).

mod continue_token;
mod field_selector;
mod label_selector;
mod list_options;
mod status;
mod time;
mod validation;
