// Package rollback holds the "rv-rollback" detector.
//
// [RVRollback] ("rv-rollback") finds etcd restored from a snapshot without
// --bump-revision (seed 003): the head — the highest resourceVersion
// successful writes show, per Bucket in the engine — falls by MinDrop or
// more after writes paused (MinGap), and no write shows the old head for
// Hold. Critical when clients watch from above the new head or updates get
// 409 with such a resourceVersion; the finding names them
// (Subjects.Stuck), the 409s and relists, and what controllers deleted or
// created again. A jump up with a relist herd (--bump-revision
// --mark-compacted) is an info finding. It remembers each cluster's head
// and the rollback going on, so that a drop at a window's edge is named
// the same and a rollback lasting days is one finding. Parameters:
// [Config].
package rollback
