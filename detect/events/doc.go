// Package events holds the reads of stored audit events that the
// detectors share: a request's stored stages ([Row], [Select]) and the
// evidence they make, and one reflector's watches and relists grouped by
// the engine ([SelectWatchGroups]), with the SQL behind them.
package events
