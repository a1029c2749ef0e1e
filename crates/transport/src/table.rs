//! A small slab keyed by `u32` handles, reusing freed slots.

#[derive(Debug)]
pub(crate) struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Table<T> {
    /// Inserts built from the handle it will get (so values can embed it).
    pub(crate) fn insert_with(&mut self, f: impl FnOnce(u32) -> T) -> u32 {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(f(i));
            i
        } else {
            let i = self.slots.len() as u32;
            self.slots.push(Some(f(i)));
            i
        }
    }
    pub(crate) fn get(&self, h: u32) -> Option<&T> {
        self.slots.get(h as usize).and_then(Option::as_ref)
    }
    pub(crate) fn get_mut(&mut self, h: u32) -> Option<&mut T> {
        self.slots.get_mut(h as usize).and_then(Option::as_mut)
    }
    pub(crate) fn remove(&mut self, h: u32) -> Option<T> {
        let v = self.slots.get_mut(h as usize)?.take();
        if v.is_some() {
            self.free.push(h);
        }
        v
    }
    /// Every live value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(Option::as_ref)
    }
    /// Every live value.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}
