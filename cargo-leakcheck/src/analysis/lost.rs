//! The objects a reachability scan found no pointer to (`<dump>.unreached`, written by the
//! runtime beside a dump), by stack and object size, and the subtraction of what the
//! harness alone loses there, object for object.

use crate::evidence::profile::Counts;

/// What the test lost on a stack beyond what the harness alone lost there: each of the
/// harness's objects takes away one of the test's of the same size, so the result is always
/// whole objects (an object of 60 bytes does not take 60 bytes off one of 100).
pub fn beyond(test: &[(u64, u64)], harness: &[(u64, u64)]) -> Counts {
    test.iter()
        .fold(Counts::default(), |total, &(size, count)| {
            let matched = harness
                .iter()
                .filter(|(s, _)| *s == size)
                .map(|(_, n)| *n)
                .sum::<u64>();
            let left = count.saturating_sub(matched);
            Counts {
                objects: total.objects + left,
                bytes: total.bytes + left * size,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_is_subtracted_object_for_object() {
        // One of 100 bytes lost by the test, one of 60 by the harness: still one of 100.
        assert_eq!(
            beyond(&[(100, 1)], &[(60, 1)]),
            Counts {
                objects: 1,
                bytes: 100
            }
        );
        // The same object lost in both: nothing of the test's.
        assert_eq!(beyond(&[(100, 1)], &[(100, 1)]), Counts::default());
        // Three of 32 and two of 64, less one of 32 and three of 64.
        assert_eq!(
            beyond(&[(32, 3), (64, 2)], &[(32, 1), (64, 3)]),
            Counts {
                objects: 2,
                bytes: 64
            }
        );
        assert_eq!(
            beyond(&[(48, 2)], &[]),
            Counts {
                objects: 2,
                bytes: 96
            }
        );
    }
}
