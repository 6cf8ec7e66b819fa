//! Output queues that give their memory back once drained after a burst.
//!
//! A node's queues fill in bursts (the answer to a join, a summary pushed to every
//! neighbour) and are drained at once; a `VecDeque` keeps its largest capacity for good,
//! which in the simulator, with thousands of nodes each keeping its largest burst, was a
//! tenth of the memory at 1000 nodes.

use std::collections::VecDeque;

/// The capacity a drained queue keeps.
const KEPT: usize = 64;

/// The next item of `queue`; once it is empty, capacity past [`KEPT`] is released.
pub(crate) fn pop_front<T>(queue: &mut VecDeque<T>) -> Option<T> {
    let item = queue.pop_front();
    if queue.is_empty() && queue.capacity() > KEPT {
        queue.shrink_to(KEPT);
    }
    item
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_queue_drained_after_a_burst_keeps_little() {
        let mut q: std::collections::VecDeque<u32> = (0..1000).collect();
        let mut n = 0;
        while super::pop_front(&mut q).is_some() {
            n += 1;
        }
        assert_eq!(n, 1000, "nothing lost");
        assert!(q.capacity() <= super::KEPT);
    }
}
