//! Tests of the simulator's mechanics with scripted nodes (no real core needed).

mod bandwidth;
mod checks;
mod fakes;
mod groups;
mod late;
mod lost;
mod mechanics;
mod trace;
mod trains;
mod trains_crowd;
mod trains_das4;
mod windows;
