//! duality-models (under construction).
