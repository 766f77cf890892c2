//! Cache benchmarks: decode + insert throughput, retained bytes per cached object and the memory
//! peak of a relist, each beside a baseline measured in the same run — a plain
//! `HashMap<String, K>` of the objects exactly as deserialised (what a naive store, or
//! kube-runtime's `Store` without a `modify` step, keeps).
//!
//! The objects are StatefulSet-owned Pods and StatefulSets serialised as the API server sends them
//! in a watch stream, `managedFields` included. Memory is measured with a counting global
//! allocator (live bytes and peak live bytes); those figures are printed before the timings.
//!
//! `retained/<kind> as the operator caches it` measures the operator's own caches
//! (`databasecluster::cache::cached`: a Pod without its spec, a StatefulSet as its JSON text,
//! `Compact`) beside the runtime's cache of the same objects whole, in the same run.

#![allow(unsafe_code, reason = "a counting global allocator measures the cache memory")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use dbcluster_operator::databasecluster::cache::cached::{CachedPod, Compact};
use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::cache::CacheWriter;
use dbcluster_operator::runtime::reflector::{
    ReflectorEvent, ReflectorStats, WatchLine, decode_list_page, decode_watch_line, elide_managed_fields,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::WatchEvent;
use serde::de::DeserializeOwned;

/// Counts live heap bytes and their peak.
struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on unchanged.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on unchanged.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on unchanged.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                let live =
                    LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size();
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn reset_peak() -> usize {
    let now = live();
    PEAK.store(now, Ordering::Relaxed);
    now
}

fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// A Running Pod of a 3-replica Postgres StatefulSet, as a watch event line (~6 KB, ~2.4 KB of it
/// managedFields), the way kube-apiserver 1.33 serialises it.
fn pod_line(i: usize, rv: u64) -> String {
    let ns = format!("team-{}", i % 50);
    let name = format!("pg-{i}-0");
    format!(
        r#"{{"type":"ADDED","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","generateName":"pg-{i}-","namespace":"{ns}","uid":"5c0b1d2e-{i:04}-4a9b-8c7d-0e1f2a3b4c5d","resourceVersion":"{rv}","creationTimestamp":"2026-11-20T08:14:03Z","labels":{{"app.kubernetes.io/instance":"pg-{i}","app.kubernetes.io/managed-by":"dbcluster-operator","app.kubernetes.io/name":"postgresql","apps.kubernetes.io/pod-index":"0","controller-revision-hash":"pg-{i}-6d4f8b9c7","statefulset.kubernetes.io/pod-name":"{name}"}},"annotations":{{"dbcluster.example.com/config-hash":"9f2c4e1a7b3d","kubectl.kubernetes.io/default-container":"postgres"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"StatefulSet","name":"pg-{i}","uid":"7a1e2b3c-{i:04}-4d5e-9f60-718293a4b5c6","controller":true,"blockOwnerDeletion":true}}],"managedFields":[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-11-20T08:14:03Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:annotations":{{".":{{}},"f:dbcluster.example.com/config-hash":{{}},"f:kubectl.kubernetes.io/default-container":{{}}}},"f:generateName":{{}},"f:labels":{{".":{{}},"f:app.kubernetes.io/instance":{{}},"f:app.kubernetes.io/managed-by":{{}},"f:app.kubernetes.io/name":{{}},"f:apps.kubernetes.io/pod-index":{{}},"f:controller-revision-hash":{{}},"f:statefulset.kubernetes.io/pod-name":{{}}}},"f:ownerReferences":{{".":{{}},"k:{{\"uid\":\"7a1e2b3c-{i:04}-4d5e-9f60-718293a4b5c6\"}}":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"postgres\"}}":{{".":{{}},"f:env":{{".":{{}},"k:{{\"name\":\"PGDATA\"}}":{{".":{{}},"f:name":{{}},"f:value":{{}}}},"k:{{\"name\":\"POSTGRES_PASSWORD\"}}":{{".":{{}},"f:name":{{}},"f:valueFrom":{{".":{{}},"f:secretKeyRef":{{}}}}}}}},"f:image":{{}},"f:imagePullPolicy":{{}},"f:name":{{}},"f:ports":{{".":{{}},"k:{{\"containerPort\":5432,\"protocol\":\"TCP\"}}":{{".":{{}},"f:containerPort":{{}},"f:name":{{}},"f:protocol":{{}}}}}},"f:readinessProbe":{{".":{{}},"f:exec":{{".":{{}},"f:command":{{}}}},"f:failureThreshold":{{}},"f:periodSeconds":{{}},"f:successThreshold":{{}},"f:timeoutSeconds":{{}}}},"f:resources":{{".":{{}},"f:limits":{{".":{{}},"f:memory":{{}}}},"f:requests":{{".":{{}},"f:cpu":{{}},"f:memory":{{}}}}}},"f:terminationMessagePath":{{}},"f:terminationMessagePolicy":{{}},"f:volumeMounts":{{".":{{}},"k:{{\"mountPath\":\"/var/lib/postgresql/data\"}}":{{".":{{}},"f:mountPath":{{}},"f:name":{{}}}}}}}}}},"f:dnsPolicy":{{}},"f:enableServiceLinks":{{}},"f:hostname":{{}},"f:restartPolicy":{{}},"f:schedulerName":{{}},"f:securityContext":{{".":{{}},"f:fsGroup":{{}}}},"f:subdomain":{{}},"f:terminationGracePeriodSeconds":{{}},"f:volumes":{{".":{{}},"k:{{\"name\":\"data\"}}":{{".":{{}},"f:name":{{}},"f:persistentVolumeClaim":{{".":{{}},"f:claimName":{{}}}}}}}}}}}}}},{{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"2026-11-20T08:14:19Z","fieldsType":"FieldsV1","fieldsV1":{{"f:status":{{"f:conditions":{{"k:{{\"type\":\"ContainersReady\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}},"k:{{\"type\":\"Initialized\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}},"k:{{\"type\":\"PodReadyToStartContainers\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}},"k:{{\"type\":\"Ready\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}}}},"f:containerStatuses":{{}},"f:hostIP":{{}},"f:hostIPs":{{}},"f:phase":{{}},"f:podIP":{{}},"f:podIPs":{{".":{{}},"k:{{\"ip\":\"10.244.{a}.{b}\"}}":{{".":{{}},"f:ip":{{}}}}}},"f:startTime":{{}}}}}},"subresource":"status"}}]}},"spec":{{"volumes":[{{"name":"data","persistentVolumeClaim":{{"claimName":"data-{name}"}}}},{{"name":"kube-api-access-x7k2p","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}},{{"configMap":{{"name":"kube-root-ca.crt","items":[{{"key":"ca.crt","path":"ca.crt"}}]}}}},{{"downwardAPI":{{"items":[{{"path":"namespace","fieldRef":{{"apiVersion":"v1","fieldPath":"metadata.namespace"}}}}]}}}}],"defaultMode":420}}}}],"containers":[{{"name":"postgres","image":"postgres:16.4","ports":[{{"name":"postgres","containerPort":5432,"protocol":"TCP"}}],"env":[{{"name":"PGDATA","value":"/var/lib/postgresql/data/pgdata"}},{{"name":"POSTGRES_PASSWORD","valueFrom":{{"secretKeyRef":{{"name":"pg-{i}-superuser","key":"password"}}}}}}],"resources":{{"limits":{{"memory":"1Gi"}},"requests":{{"cpu":"250m","memory":"1Gi"}}}},"volumeMounts":[{{"name":"data","mountPath":"/var/lib/postgresql/data"}},{{"name":"kube-api-access-x7k2p","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}}],"readinessProbe":{{"exec":{{"command":["pg_isready","-U","postgres"]}},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default","nodeName":"worker-{node}","securityContext":{{"fsGroup":999}},"hostname":"{name}","subdomain":"pg-{i}","schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"status":{{"phase":"Running","conditions":[{{"type":"PodReadyToStartContainers","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:12Z"}},{{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:03Z"}},{{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:19Z"}},{{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:19Z"}},{{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:03Z"}}],"hostIP":"172.18.0.{node}","hostIPs":[{{"ip":"172.18.0.{node}"}}],"podIP":"10.244.{a}.{b}","podIPs":[{{"ip":"10.244.{a}.{b}"}}],"startTime":"2026-11-20T08:14:03Z","containerStatuses":[{{"name":"postgres","state":{{"running":{{"startedAt":"2026-11-20T08:14:11Z"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"docker.io/library/postgres:16.4","imageID":"docker.io/library/postgres@sha256:d0f363f8366fbc3f52d172c6e76bc27151c3d643b870e1062b4e8bfe65baf609","containerID":"containerd://3b4f0c1d2e5a6978b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5","started":true,"volumeMounts":[{{"name":"data","mountPath":"/var/lib/postgresql/data"}},{{"name":"kube-api-access-x7k2p","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true,"recursiveReadOnly":"Disabled"}}]}}],"qosClass":"Burstable"}}}}}}"#,
        node = i % 20 + 2,
        a = i / 250 % 250,
        b = i % 250 + 2,
    )
}

/// The StatefulSet that owns `pod_line(i)`, as a watch event line (~4.5 KB, ~1.9 KB managedFields).
fn statefulset_line(i: usize, rv: u64) -> String {
    let ns = format!("team-{}", i % 50);
    format!(
        r#"{{"type":"ADDED","object":{{"kind":"StatefulSet","apiVersion":"apps/v1","metadata":{{"name":"pg-{i}","namespace":"{ns}","uid":"7a1e2b3c-{i:04}-4d5e-9f60-718293a4b5c6","resourceVersion":"{rv}","generation":3,"creationTimestamp":"2026-11-20T08:14:02Z","labels":{{"app.kubernetes.io/instance":"pg-{i}","app.kubernetes.io/managed-by":"dbcluster-operator","app.kubernetes.io/name":"postgresql"}},"ownerReferences":[{{"apiVersion":"db.example.com/v1alpha1","kind":"DatabaseCluster","name":"pg-{i}","uid":"1f2e3d4c-{i:04}-4b5a-8697-a8b9c0d1e2f3","controller":true,"blockOwnerDeletion":true}}],"managedFields":[{{"manager":"dbcluster-operator","operation":"Apply","apiVersion":"apps/v1","time":"2026-11-20T08:14:02Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:labels":{{"f:app.kubernetes.io/instance":{{}},"f:app.kubernetes.io/managed-by":{{}},"f:app.kubernetes.io/name":{{}}}},"f:ownerReferences":{{"k:{{\"uid\":\"1f2e3d4c-{i:04}-4b5a-8697-a8b9c0d1e2f3\"}}":{{}}}}}},"f:spec":{{"f:podManagementPolicy":{{}},"f:replicas":{{}},"f:selector":{{}},"f:serviceName":{{}},"f:template":{{"f:metadata":{{"f:annotations":{{"f:dbcluster.example.com/config-hash":{{}}}},"f:labels":{{"f:app.kubernetes.io/instance":{{}},"f:app.kubernetes.io/managed-by":{{}},"f:app.kubernetes.io/name":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"postgres\"}}":{{".":{{}},"f:env":{{"k:{{\"name\":\"PGDATA\"}}":{{".":{{}},"f:name":{{}},"f:value":{{}}}},"k:{{\"name\":\"POSTGRES_PASSWORD\"}}":{{".":{{}},"f:name":{{}},"f:valueFrom":{{"f:secretKeyRef":{{}}}}}}}},"f:image":{{}},"f:name":{{}},"f:ports":{{"k:{{\"containerPort\":5432,\"protocol\":\"TCP\"}}":{{".":{{}},"f:containerPort":{{}},"f:name":{{}}}}}},"f:readinessProbe":{{"f:exec":{{"f:command":{{}}}}}},"f:resources":{{"f:limits":{{"f:memory":{{}}}},"f:requests":{{"f:cpu":{{}},"f:memory":{{}}}}}},"f:volumeMounts":{{"k:{{\"mountPath\":\"/var/lib/postgresql/data\"}}":{{".":{{}},"f:mountPath":{{}},"f:name":{{}}}}}}}}}},"f:securityContext":{{"f:fsGroup":{{}}}}}}}},"f:volumeClaimTemplates":{{}}}}}}}},{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"apps/v1","time":"2026-11-20T08:14:40Z","fieldsType":"FieldsV1","fieldsV1":{{"f:status":{{"f:availableReplicas":{{}},"f:collisionCount":{{}},"f:currentReplicas":{{}},"f:currentRevision":{{}},"f:observedGeneration":{{}},"f:readyReplicas":{{}},"f:replicas":{{}},"f:updateRevision":{{}},"f:updatedReplicas":{{}}}}}},"subresource":"status"}}]}},"spec":{{"replicas":3,"selector":{{"matchLabels":{{"app.kubernetes.io/instance":"pg-{i}","app.kubernetes.io/name":"postgresql"}}}},"template":{{"metadata":{{"labels":{{"app.kubernetes.io/instance":"pg-{i}","app.kubernetes.io/managed-by":"dbcluster-operator","app.kubernetes.io/name":"postgresql"}},"annotations":{{"dbcluster.example.com/config-hash":"9f2c4e1a7b3d"}}}},"spec":{{"containers":[{{"name":"postgres","image":"postgres:16.4","ports":[{{"name":"postgres","containerPort":5432,"protocol":"TCP"}}],"env":[{{"name":"PGDATA","value":"/var/lib/postgresql/data/pgdata"}},{{"name":"POSTGRES_PASSWORD","valueFrom":{{"secretKeyRef":{{"name":"pg-{i}-superuser","key":"password"}}}}}}],"resources":{{"limits":{{"memory":"1Gi"}},"requests":{{"cpu":"250m","memory":"1Gi"}}}},"volumeMounts":[{{"name":"data","mountPath":"/var/lib/postgresql/data"}}],"readinessProbe":{{"exec":{{"command":["pg_isready","-U","postgres"]}},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{{"fsGroup":999}},"schedulerName":"default-scheduler"}}}},"volumeClaimTemplates":[{{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{{"name":"data"}},"spec":{{"accessModes":["ReadWriteOnce"],"resources":{{"requests":{{"storage":"10Gi"}}}},"volumeMode":"Filesystem"}},"status":{{"phase":"Pending"}}}}],"serviceName":"pg-{i}","podManagementPolicy":"OrderedReady","updateStrategy":{{"type":"RollingUpdate","rollingUpdate":{{"partition":0}}}},"revisionHistoryLimit":10,"persistentVolumeClaimRetentionPolicy":{{"whenDeleted":"Retain","whenScaled":"Retain"}}}},"status":{{"observedGeneration":3,"replicas":3,"readyReplicas":3,"currentReplicas":3,"updatedReplicas":3,"currentRevision":"pg-{i}-6d4f8b9c7","updateRevision":"pg-{i}-6d4f8b9c7","collisionCount":0,"availableReplicas":3}}}}}}"#
    )
}

fn decode<K: Resource + DeserializeOwned>(line: &[u8]) -> K {
    match decode_watch_line::<K>(line) {
        Ok(WatchLine::Added(obj)) => obj,
        other => panic!("fixture does not decode: {:?}", other.err()),
    }
}

/// What the informer does with a watch line: cut managedFields out of the text, then decode.
fn elide_and_decode<K: dbcluster_operator::runtime::Object + DeserializeOwned>(line: &[u8]) -> K {
    let elided = elide_managed_fields(line);
    match decode_watch_line::<K>(elided.as_deref().unwrap_or(line)) {
        Ok(WatchLine::Added(obj)) => obj,
        other => panic!("fixture does not decode: {:?}", other.err()),
    }
}

/// Baseline: the objects as deserialised, in a `HashMap` keyed by `namespace/name`.
fn baseline_store<K: Resource + DeserializeOwned>(lines: &[String]) -> HashMap<String, K> {
    let mut map = HashMap::new();
    for line in lines {
        let obj: K = decode(line.as_bytes());
        map.insert(ObjectKey::of(&obj).to_string(), obj);
    }
    map
}

/// Ours: decode each watch line and store it (managedFields stripped).
fn cache_store<K: Resource + DeserializeOwned + Send + Sync + 'static>(lines: &[String]) -> CacheWriter<K> {
    filled(CacheWriter::default(), lines)
}

/// `cache` with each watch line decoded and stored.
fn filled<K: dbcluster_operator::runtime::Object + DeserializeOwned + Send + Sync + 'static>(
    mut cache: CacheWriter<K>,
    lines: &[String],
) -> CacheWriter<K> {
    for line in lines {
        cache.apply(ReflectorEvent::Applied(elide_and_decode::<K>(line.as_bytes())));
    }
    cache
}

/// Live bytes a value built by `build` keeps, divided by `n`.
fn retained_per_object<T>(n: usize, build: impl FnOnce() -> T) -> (f64, T) {
    let before = live();
    let value = build();
    (((live() - before) as f64) / n as f64, value)
}

fn memory_report<K>(kind: &str, n: usize, line: fn(usize, u64) -> String)
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
{
    let lines: Vec<String> = (0..n).map(|i| line(i, 1000 + i as u64)).collect();
    let json = lines.iter().map(String::len).sum::<usize>() as f64 / n as f64;
    let (baseline, baseline_map) = retained_per_object(n, || baseline_store::<K>(&lines));
    drop(baseline_map);
    let (ours, mut cache) = retained_per_object(n, || cache_store::<K>(&lines));
    println!(
        "retained/{kind}: json {:.1} KB; baseline HashMap<String, {kind}> {:.1} KB; cache {:.1} KB = {:.3}x baseline",
        json / 1000.0,
        baseline / 1000.0,
        ours / 1000.0,
        ours / baseline
    );
    let steady = ours * n as f64;

    // Streaming relist: every object comes again, a tenth of them changed and 1 % gone.
    let relist_lines: Vec<String> = (0..n)
        .filter(|i| i % 100 != 0)
        .map(|i| line(i, if i % 10 == 0 { 900_000 + i as u64 } else { 1000 + i as u64 }))
        .collect();
    let start = reset_peak();
    cache.apply(ReflectorEvent::RelistStarted);
    for l in &relist_lines {
        black_box(cache.apply(ReflectorEvent::Listed(elide_and_decode::<K>(l.as_bytes()))));
    }
    drop(black_box(cache.apply(ReflectorEvent::RelistDone { resource_version: "999999999".into() })));
    let streaming_peak = (steady + (peak() - start) as f64) / steady;

    // Every object changed: each listed object replaces the cached one.
    let all_changed: Vec<String> = (0..n).map(|i| line(i, 2_000_000 + i as u64)).collect();
    let start = reset_peak();
    cache.apply(ReflectorEvent::RelistStarted);
    for l in &all_changed {
        black_box(cache.apply(ReflectorEvent::Listed(elide_and_decode::<K>(l.as_bytes()))));
    }
    drop(black_box(cache.apply(ReflectorEvent::RelistDone { resource_version: "999999999".into() })));
    let changed_peak = (steady + (peak() - start) as f64) / steady;

    // Paginated relist of the same, 500 objects per page (the page's bytes are input, not counted).
    let pages: Vec<String> = all_changed
        .chunks(500)
        .map(|chunk| {
            let items: Vec<&str> =
                chunk.iter().map(|l| &l[l.find(r#""object":"#).map_or(0, |p| p + 9)..l.len() - 1]).collect();
            format!(
                r#"{{"kind":"List","apiVersion":"v1","metadata":{{"resourceVersion":"3"}},"items":[{}]}}"#,
                items.join(",")
            )
        })
        .collect();
    let stats = ReflectorStats::default();
    let start = reset_peak();
    cache.apply(ReflectorEvent::RelistStarted);
    for page in &pages {
        let elided = elide_managed_fields(page.as_bytes());
        decode_list_page::<K>(
            elided.as_deref().unwrap_or(page.as_bytes()),
            &mut |obj| {
                black_box(cache.apply(ReflectorEvent::Listed(obj)));
            },
            &stats,
        )
        .expect("fixture page decodes");
    }
    drop(black_box(cache.apply(ReflectorEvent::RelistDone { resource_version: "3".into() })));
    let paged_peak = (steady + (peak() - start) as f64) / steady;

    // Baseline relist, kube-runtime style: decode into a second map, then swap.
    let (per_object, store) = retained_per_object(n, || baseline_store::<K>(&lines));
    black_box(&store);
    let steady_baseline = per_object * n as f64;
    let start = reset_peak();
    let fresh = baseline_store::<K>(&all_changed);
    let store = black_box(fresh);
    let baseline_peak = (steady_baseline + (peak() - start) as f64) / steady_baseline;
    drop(store);
    println!(
        "relist peak/{kind} ({n} objects), x steady state: streaming 10% changed {streaming_peak:.3}; streaming all changed {changed_peak:.3}; paginated all changed {paged_peak:.3}; baseline (second map + swap) {baseline_peak:.3}"
    );
    assert_eq!(cache.cache().len(), n);
}

/// Retained bytes per object in the operator's cache of this kind (`S`, as `writer` keeps it,
/// decoded from the same lines), beside the runtime's cache of the same objects whole (`W`;
/// managedFields cut from both).
fn shaped_report<W, S>(kind: &str, n: usize, line: fn(usize, u64) -> String, writer: fn() -> CacheWriter<S>)
where
    W: Resource + DeserializeOwned + Send + Sync + 'static,
    S: dbcluster_operator::runtime::Object + DeserializeOwned + Send + Sync + 'static,
{
    let lines: Vec<String> = (0..n).map(|i| line(i, 1000 + i as u64)).collect();
    let (whole, cache) = retained_per_object(n, || cache_store::<W>(&lines));
    drop(cache);
    let (shaped, cache) = retained_per_object(n, || filled(writer(), &lines));
    assert_eq!(cache.cache().len(), n);
    println!(
        "retained/{kind} as the operator caches it: {:.1} KB; whole (the runtime's cache) {:.1} KB; {:.3}x",
        shaped / 1000.0,
        whole / 1000.0,
        shaped / whole
    );
}

fn memory(_: &mut Criterion) {
    let n = std::env::var("CACHE_BENCH_OBJECTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    memory_report::<Pod>("Pod", n, pod_line);
    memory_report::<StatefulSet>("StatefulSet", n, statefulset_line);
    shaped_report::<Pod, CachedPod>("Pod", n, pod_line, CacheWriter::<CachedPod>::as_received);
    shaped_report::<StatefulSet, Compact<StatefulSet>>(
        "StatefulSet",
        n,
        statefulset_line,
        CacheWriter::<Compact<StatefulSet>>::as_received,
    );
}

fn throughput<K>(c: &mut Criterion, kind: &str, line: fn(usize, u64) -> String)
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
{
    const N: usize = 1000;
    let lines: Vec<String> = (0..N).map(|i| line(i, 1000 + i as u64)).collect();
    let mut group = c.benchmark_group(format!("decode_insert/{kind}"));
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("baseline_kube_watchevent_hashmap", |b| {
        b.iter_batched(
            HashMap::<String, K>::new,
            |mut map| {
                for l in &lines {
                    if let Ok(WatchEvent::Added(obj)) = serde_json::from_slice::<WatchEvent<K>>(l.as_bytes())
                    {
                        map.insert(ObjectKey::of(&obj).to_string(), obj);
                    }
                }
                map
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("cache_decode_then_strip", |b| {
        b.iter_batched(
            CacheWriter::<K>::default,
            |mut cache| {
                for l in &lines {
                    black_box(cache.apply(ReflectorEvent::Applied(decode::<K>(l.as_bytes()))));
                }
                cache
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("cache", |b| {
        b.iter_batched(
            CacheWriter::<K>::default,
            |mut cache| {
                for l in &lines {
                    black_box(cache.apply(ReflectorEvent::Applied(elide_and_decode::<K>(l.as_bytes()))));
                }
                cache
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn decode_insert(c: &mut Criterion) {
    throughput::<Pod>(c, "Pod", pod_line);
    throughput::<StatefulSet>(c, "StatefulSet", statefulset_line);
}

criterion_group!(benches, memory, decode_insert);
criterion_main!(benches);
