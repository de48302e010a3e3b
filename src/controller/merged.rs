//! The watches of several namespaces kept in one kube-runtime store, as one watch over all of
//! them would keep it. A store takes a watch's relist whole: `Init` starts a new list and
//! `InitDone` puts it in place of everything the store held. Fed with several namespaces'
//! streams as they come, one namespace's relist would drop every other namespace's objects.
//! [`Merged`] gives the store one first list (every namespace's first list, then one
//! `InitDone`) and turns each later relist of a namespace into the applies and deletes that
//! bring that namespace's objects, and only those, to what was listed.

use std::collections::HashSet;
use std::hash::Hash;

use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher::Event;

/// What else is kept of a store's objects, written as the store takes them: an index.
pub trait Index<K>: Send + Sync {
    /// `o` is in the store, new or replacing the object of its name.
    fn applied(&mut self, o: &K);
    /// `o` left the store.
    fn deleted(&mut self, o: &K);
}

/// One store fed by one watch per namespace (or by one watch of every namespace).
pub struct Merged<K>
where
    K: Lookup + kube::Resource + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    reader: Store<K>,
    /// Per watch: the namespace it lists (`None`: every namespace), its relist under way, and
    /// whether its first list is in.
    watches: Vec<Watch<K>>,
    /// Events of watches whose first list is in, held until every watch's is: the store takes
    /// the first lists as one.
    held: Vec<(usize, Event<K>)>,
    /// Whether the store holds every watch's first list.
    ready: bool,
    /// Indexes kept with the store.
    indexes: Vec<Box<dyn Index<K>>>,
}

struct Watch<K> {
    namespace: Option<String>,
    listing: Option<Vec<K>>,
    listed: bool,
}

impl<K> Merged<K>
where
    K: Lookup + kube::Resource + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    /// A store for the watches of `namespaces` (`None`: one watch of every namespace), in this
    /// order: [`Merged::take`] names a watch by its index here.
    pub fn new(writer: Writer<K>, namespaces: &[Option<&str>]) -> Self {
        let mut writer = writer;
        writer.apply_watcher_event(&Event::Init);
        Self {
            reader: writer.as_reader(),
            writer,
            watches: namespaces
                .iter()
                .map(|ns| Watch {
                    namespace: ns.map(str::to_string),
                    listing: None,
                    listed: false,
                })
                .collect(),
            held: Vec::new(),
            ready: false,
            indexes: Vec::new(),
        }
    }

    /// The store with `index` kept as it takes objects.
    pub fn with_index(mut self, index: impl Index<K> + 'static) -> Self {
        self.indexes.push(Box::new(index));
        self
    }

    /// Writes `event` into the store and its indexes.
    fn write(&mut self, event: &Event<K>) {
        self.writer.apply_watcher_event(event);
        for index in &mut self.indexes {
            match event {
                Event::Apply(o) | Event::InitApply(o) => index.applied(o),
                Event::Delete(o) => index.deleted(o),
                Event::Init | Event::InitDone => {}
            }
        }
    }

    /// The store's reading end.
    pub fn reader(&self) -> Store<K> {
        self.reader.clone()
    }

    /// Takes in one event of watch `watch`; returns the objects the store took in as applied
    /// or listed (what the controller reconciles).
    pub fn take(&mut self, watch: usize, event: Event<K>) -> Vec<K> {
        let Some(w) = self.watches.get_mut(watch) else {
            return Vec::new();
        };
        if self.ready {
            return self.steady(watch, event);
        }
        if w.listed {
            self.held.push((watch, event));
            return Vec::new();
        }
        match event {
            Event::Init => w.listing = Some(Vec::new()),
            Event::InitApply(o) => w.listing.get_or_insert_with(Vec::new).push(o),
            Event::InitDone => return self.first_list_in(watch),
            apply_or_delete => self.held.push((watch, apply_or_delete)),
        }
        Vec::new()
    }

    /// Watch `watch`'s first list is in: the store takes its objects into its first list, and
    /// once every watch's is in, the list as a whole and then the events held meanwhile.
    fn first_list_in(&mut self, watch: usize) -> Vec<K> {
        let w = &mut self.watches[watch];
        w.listed = true;
        let listed = w.listing.take().unwrap_or_default();
        for o in &listed {
            self.write(&Event::InitApply(o.clone()));
        }
        let mut objects = listed;
        if self.watches.iter().all(|w| w.listed) {
            self.write(&Event::InitDone);
            self.ready = true;
            for (watch, event) in std::mem::take(&mut self.held) {
                objects.extend(self.steady(watch, event));
            }
        }
        objects
    }

    /// One event once the store holds every first list: applies and deletes as they come; a
    /// relist of a namespace, once in, applies what it listed and deletes that namespace's
    /// objects it did not list.
    fn steady(&mut self, watch: usize, event: Event<K>) -> Vec<K> {
        let w = &mut self.watches[watch];
        match event {
            Event::Apply(o) => {
                self.write(&Event::Apply(o.clone()));
                return vec![o];
            }
            Event::Delete(o) => self.write(&Event::Delete(o)),
            Event::Init => w.listing = Some(Vec::new()),
            Event::InitApply(o) => w.listing.get_or_insert_with(Vec::new).push(o),
            Event::InitDone => {
                let listed = w.listing.take().unwrap_or_default();
                let namespace = w.namespace.clone();
                let names: HashSet<(Option<&str>, Option<&str>)> =
                    listed.iter().map(|o| key(o)).collect();
                let gone = self.reader.state().into_iter().filter(|o| {
                    let (ns, name) = key(o.as_ref());
                    (namespace.is_none() || ns == namespace.as_deref())
                        && !names.contains(&(ns, name))
                });
                for o in gone.collect::<Vec<_>>() {
                    self.write(&Event::Delete(o.as_ref().clone()));
                }
                for o in &listed {
                    self.write(&Event::Apply(o.clone()));
                }
                return listed;
            }
        }
        Vec::new()
    }
}

/// An object's namespace and name.
fn key<K: kube::Resource>(o: &K) -> (Option<&str>, Option<&str>) {
    let meta = o.meta();
    (meta.namespace.as_deref(), meta.name.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;

    fn cm(ns: &str, name: &str, v: &str) -> ConfigMap {
        let mut o = ConfigMap::default();
        o.metadata.namespace = Some(ns.into());
        o.metadata.name = Some(name.into());
        o.metadata.resource_version = Some(v.into());
        o
    }

    fn held(store: &Store<ConfigMap>) -> Vec<String> {
        let mut keys: Vec<String> = store
            .state()
            .iter()
            .map(|o| {
                let (ns, name) = key(o.as_ref());
                format!(
                    "{}/{}@{}",
                    ns.unwrap_or_default(),
                    name.unwrap_or_default(),
                    o.metadata.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect();
        keys.sort();
        keys
    }

    fn names(objects: &[ConfigMap]) -> Vec<String> {
        objects.iter().map(|o| o.name_any()).collect()
    }

    fn list(m: &mut Merged<ConfigMap>, watch: usize, objects: Vec<ConfigMap>) -> Vec<String> {
        let mut out = m.take(watch, Event::Init);
        for o in objects {
            out.extend(m.take(watch, Event::InitApply(o)));
        }
        out.extend(m.take(watch, Event::InitDone));
        names(&out)
    }

    #[tokio::test]
    async fn the_store_is_ready_once_every_namespace_is_listed_and_holds_each_as_it_is() {
        let mut m = Merged::new(Writer::<ConfigMap>::default(), &[Some("a"), Some("b")]);
        let store = m.reader();
        assert_eq!(list(&mut m, 0, vec![cm("a", "one", "1")]), ["one"]);
        // Events of a listed namespace wait for the others' lists, then come in order.
        assert!(m.take(0, Event::Apply(cm("a", "one", "5"))).is_empty());
        assert!(m.take(0, Event::Apply(cm("a", "two", "6"))).is_empty());
        assert!(m.take(0, Event::Delete(cm("a", "two", "7"))).is_empty());
        assert!(store.is_empty(), "not ready before b is listed");
        let first = list(&mut m, 1, vec![cm("b", "three", "3")]);
        assert_eq!(first, ["three", "one", "two"]);
        tokio::time::timeout(std::time::Duration::from_secs(1), store.wait_until_ready())
            .await
            .expect("ready")
            .expect("ready");
        assert_eq!(held(&store), ["a/one@5", "b/three@3"]);
    }

    #[tokio::test]
    async fn a_relist_of_one_namespace_leaves_the_others_objects_in_the_store() {
        let mut m = Merged::new(Writer::<ConfigMap>::default(), &[Some("a"), Some("b")]);
        let store = m.reader();
        list(&mut m, 0, vec![cm("a", "one", "1"), cm("a", "two", "2")]);
        list(&mut m, 1, vec![cm("b", "three", "3")]);
        // b's watch expires and lists again: a's objects stay, b's list replaces b's.
        assert_eq!(
            list(&mut m, 1, vec![cm("b", "four", "9")]),
            ["four"],
            "the listed objects are reconciled"
        );
        assert_eq!(held(&store), ["a/one@1", "a/two@2", "b/four@9"]);
        // a relists with one object gone and one changed.
        list(&mut m, 0, vec![cm("a", "two", "10")]);
        assert_eq!(held(&store), ["a/two@10", "b/four@9"]);
        assert_eq!(
            names(&m.take(1, Event::Apply(cm("b", "five", "11")))),
            ["five"]
        );
        assert!(m.take(1, Event::Delete(cm("b", "four", "12"))).is_empty());
        assert_eq!(held(&store), ["a/two@10", "b/five@11"]);
    }

    #[tokio::test]
    async fn a_watch_of_every_namespace_relists_them_all() {
        let mut m = Merged::new(Writer::<ConfigMap>::default(), &[None]);
        let store = m.reader();
        list(&mut m, 0, vec![cm("a", "one", "1"), cm("b", "two", "2")]);
        assert_eq!(held(&store), ["a/one@1", "b/two@2"]);
        list(&mut m, 0, vec![cm("b", "two", "3")]);
        assert_eq!(held(&store), ["b/two@3"]);
        // A relist that restarts before it is in keeps only the last list.
        m.take(0, Event::Init);
        m.take(0, Event::InitApply(cm("a", "x", "4")));
        list(&mut m, 0, vec![cm("a", "y", "5")]);
        assert_eq!(held(&store), ["a/y@5"]);
    }
}
