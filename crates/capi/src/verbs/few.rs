//! A posted chain's requests, held without an allocation when there is one
//! (most posts: `ib_send_lat`, `ib_read_bw` and UCX post one request at a
//! time; the two heap allocations a post made for them were ~4 % of a
//! same-host 64 KiB `ib_read_bw` client's instructions, callgrind).

/// None, one or many values, in order.
#[derive(Debug, Default)]
pub(super) enum Few<T> {
    #[default]
    Empty,
    One([T; 1]),
    Many(Vec<T>),
}

impl<T> Few<T> {
    /// Appends `x`.
    pub(super) fn push(&mut self, x: T) {
        match self {
            Few::Many(v) => v.push(x),
            Few::Empty => *self = Few::One([x]),
            Few::One(_) => {
                if let Few::One([a]) = std::mem::take(self) {
                    *self = Few::Many(vec![a, x]);
                }
            }
        }
    }

    pub(super) fn as_slice(&self) -> &[T] {
        match self {
            Few::Empty => &[],
            Few::One(a) => a,
            Few::Many(v) => v,
        }
    }
}

/// The values of a [`Few`], in order.
pub(super) enum IntoIter<T> {
    One(std::array::IntoIter<T, 1>),
    Many(std::vec::IntoIter<T>),
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            IntoIter::One(i) => i.next(),
            IntoIter::Many(i) => i.next(),
        }
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        match self {
            Few::Empty => IntoIter::Many(Vec::new().into_iter()),
            Few::One(a) => IntoIter::One(a.into_iter()),
            Few::Many(v) => IntoIter::Many(v.into_iter()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Few;

    #[test]
    fn values_keep_their_order_across_the_switch_to_many() {
        let mut f = Few::default();
        assert!(f.as_slice().is_empty());
        f.push(1);
        assert!(matches!(f, Few::One(_)));
        assert_eq!(f.as_slice(), &[1]);
        f.push(2);
        f.push(3);
        assert_eq!(f.as_slice(), &[1, 2, 3]);
        assert_eq!(f.into_iter().collect::<Vec<_>>(), vec![1, 2, 3]);
        let one: Few<u8> = {
            let mut f = Few::default();
            f.push(7);
            f
        };
        assert_eq!(one.into_iter().collect::<Vec<_>>(), vec![7]);
        assert_eq!(Few::<u8>::Empty.into_iter().count(), 0);
    }
}
