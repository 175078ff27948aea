// Package relist holds the "relist-loop" and "relist-herd" detectors.
//
// Both relist detectors use internal/reflector's definition of a relist:
// a list (a list's first page or a watch-list) of a target — resource,
// namespace, object name and selectors: the same collection or object —
// that the same client (a program instance) had already read or watched
// before. A client's first read of a target is no relist: a node starting,
// or a kubelet reading the ConfigMaps and Secrets of a pod it was just
// given, one object at a time.
//
// [Loop] ("relist-loop") finds a client stuck relisting: its watches
// of one target end within ShortWatch and its next request for that target
// is a relist, MinTurns times in a row, each turn within MaxGap of the one
// before — the "too old resource version" loop. One finding per program
// identity and resource, its turns remembered across windows; critical
// after CriticalAfter.
//
// [Herd] ("relist-herd") finds at least MinClients distinct clients
// relisting one resource within 60 s, Factor times the window's median
// for it, each relist judged against the clients' requests in the window
// and the LookBack before it: one finding per herd, information naming a
// heartbeat-loss or rv-rollback finding that covers its time.
package relist
