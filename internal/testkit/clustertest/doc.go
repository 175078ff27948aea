// Package clustertest holds no code. Its tests run the SQL of every reader
// and writer (the detectors, the findings repository, event listings,
// reports and the ingest writer) on the cluster-mode schema: Distributed
// tables over local tables, on a one-shard cluster inside the embedded
// engine (storetest.OpenCluster). They live in a package of their own
// because the embedded engine runs one data path per process, and the
// other packages' tests keep a single-node store open.
//
// They check the SQL's shape on a cluster (Distributed reads and inserts,
// FINAL and aggregation through Distributed tables, GLOBAL IN), not
// replication or several shards: see deploy/clickhouse/README.md for what
// was and was not verified.
package clustertest
