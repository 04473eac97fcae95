//! Task-aware synchronisation, usable across loops: a waiter parks its task,
//! never its OS thread.
