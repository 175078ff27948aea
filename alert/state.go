package alert

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/auditlens/auditlens/detect"
)

// stateVersion is the format of the state file.
const stateVersion = 1

// stateFile is what a notifier keeps on disk: per route, each active
// finding as last sent (without its evidence) and when.
type stateFile struct {
	Version int                              `json:"version"`
	Routes  map[string]map[string]sentOnDisk `json:"routes"`
}

type sentOnDisk struct {
	Finding detect.Finding `json:"finding"`
	At      time.Time      `json:"at"`
}

// loadState reads the state file at path into into, for the routes it
// has. A missing file is an empty state.
func loadState(path string, into map[string]map[string]sent) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var sf stateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if sf.Version != stateVersion {
		return fmt.Errorf("%s: state version %d, want %d", path, sf.Version, stateVersion)
	}
	for route, fs := range sf.Routes {
		st, ok := into[route]
		if !ok {
			continue // a route no longer configured
		}
		for id, s := range fs {
			st[id] = sent{f: s.Finding, at: s.At}
		}
	}
	return nil
}

// saveState writes from to path atomically and durably: a crash leaves
// the old state or the new one.
func saveState(path string, from map[string]map[string]sent) error {
	sf := stateFile{Version: stateVersion, Routes: map[string]map[string]sentOnDisk{}}
	for route, st := range from {
		m := map[string]sentOnDisk{}
		for id, s := range st {
			f := s.f
			f.Evidence = nil
			m[id] = sentOnDisk{Finding: f, At: s.at}
		}
		sf.Routes[route] = m
	}
	b, err := json.Marshal(sf)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
