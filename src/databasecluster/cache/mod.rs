//! What the informers keep of the children and what a pass reads of them: the compact cached forms
//! ([`cached`], [`compact`], [`packed`], [`identity`]), the forms a pass reads through ([`forms`]),
//! and drift between a live child and what the operator would write ([`drift`]).

pub mod cached;
pub mod compact;
pub mod drift;
pub mod forms;
pub mod identity;
pub mod packed;
