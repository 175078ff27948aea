// Package detectors is the registry of auditlens's detectors: every one
// of them with its default parameters ([Default]), and their parameters
// as the detectors section of the configuration file sets them ([Config],
// [ParseConfig]). serve, scan, import, detect and policy check take their
// detectors from here.
package detectors
