package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/auditlens/auditlens/internal/fifo"
)

// The engine's JSON parser reads one file in one stream: its parallel
// parsing splits the stream into chunks on one thread, and on two cores
// that thread costs as much as it saves. Read as several files, each
// parsed by a stream of its own, the same log loads ~20 % faster
// (docs/benchmarks.md). A feed shows the engine one large plain log as
// several named pipes, each holding whole lines of one part of the file,
// which the kernel moves into the pipes without copying them.

// feedMinBytes is the smallest file a feed splits: below it the pipes'
// setup is not worth it. feedCores is how many streams the engine parses
// at once. Variables for the tests, which feed small files in more parts.
var (
	feedMinBytes int64 = 64 << 20
	feedCores          = runtime.NumCPU()
)

// feedPipeSize is the buffer each pipe asks for (fifo.Grow): the largest
// an unprivileged process gets by default.
const feedPipeSize = 1 << 20

// feed serves the parts of one file to the engine through named pipes in a
// directory of their own.
type feed struct {
	dir     string
	pattern string // the engine's file() glob naming every pipe
	pipes   []*os.File
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error
	done    int           // parts moved whole into their pipes and read
	stop    chan struct{} // closed by Stop
}

// feedParts is how many parts a feed cuts a plain file of size bytes into:
// one per core, none (1) below feedMinBytes or where feeds are missing.
func feedParts(size int64) int {
	if !feedSupported || size < feedMinBytes {
		return 1
	}
	return min(feedCores, 16)
}

// cutLines returns the offsets that cut the file f of size bytes into at
// most parts parts of whole lines: 0, each cut just past a newline, and
// size. A file whose lines are too long to cut gives fewer parts.
func cutLines(f *os.File, size int64, parts int) ([]int64, error) {
	cuts := []int64{0}
	buf := make([]byte, 64<<10)
	for i := 1; i < parts; i++ {
		// The first newline from the byte before the target on: a
		// target that starts a line is a cut.
		off := max(size*int64(i)/int64(parts)-1, cuts[len(cuts)-1])
		for {
			n, err := f.ReadAt(buf, off)
			if j := bytes.IndexByte(buf[:n], '\n'); j >= 0 {
				off += int64(j) + 1
				break
			}
			off += int64(n)
			if err == io.EOF || off >= size {
				off = size
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
			}
		}
		if off >= size {
			break
		}
		if off > cuts[len(cuts)-1] {
			cuts = append(cuts, off)
		}
	}
	return append(cuts, size), nil
}

// startFeed cuts the plain file path of size bytes into parts parts of
// whole lines and starts moving each into a named pipe of its own. It
// returns nil, nil when the file gives fewer than two parts or the pipes'
// directory could not be named to the engine. Stop must be called once the
// engine is done reading, whether it read everything or not.
func startFeed(path string, size int64, parts int) (*feed, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	cuts, err := cutLines(src, size, parts)
	if err != nil || len(cuts) < 3 {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "auditlens-feed-")
	if err != nil {
		return nil, fmt.Errorf("making the pipes' directory: %w", err)
	}
	if strings.ContainsAny(dir, "*?{}[]'\\") {
		os.RemoveAll(dir)
		return nil, nil // the engine would read the name as a pattern
	}
	// Braces, not a wildcard: the engine's wildcards match regular files
	// only, while a list in braces names each file as it is.
	names := make([]string, len(cuts)-1)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	fd := &feed{dir: dir, pattern: filepath.Join(dir, "part-{"+strings.Join(names, ",")+"}"), stop: make(chan struct{})}
	for i := range len(cuts) - 1 {
		w, err := fifo.Make(filepath.Join(dir, "part-"+strconv.Itoa(i)))
		if err != nil {
			fd.Stop()
			return nil, fmt.Errorf("feeding %s to the engine: %w", path, err)
		}
		_ = fifo.Grow(w, feedPipeSize) // best effort: a smaller pipe only reads slower
		in, err := os.Open(path)
		if err != nil {
			w.Close()
			fd.Stop()
			return nil, err
		}
		fd.pipes = append(fd.pipes, w)
		fd.wg.Add(1)
		go func(off, end int64) {
			defer fd.wg.Done()
			defer in.Close()
			// An error is recorded before the pipe closes: closed, the
			// pipe gives the engine its EOF, and Stop, called once the
			// engine returns, must see why the part ended early.
			if err := spliceRange(w, in, off, end); err != nil {
				fd.fail(fmt.Errorf("feeding bytes %d to %d of %s to the engine: %w", off, end, path, err))
			} else if fd.drain(w) {
				fd.mu.Lock()
				fd.done++
				fd.mu.Unlock()
			}
			if err := w.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
				fd.fail(fmt.Errorf("closing the pipe of %s: %w", path, err))
			}
		}(cuts[i], cuts[i+1])
	}
	return fd, nil
}

// drain waits until the engine has read every byte of the pipe w, and
// returns true then; false when Stop was called first. The last writer
// must not close a pipe before its reader has opened it: a pipe that
// nobody holds open loses what it holds, and the engine's open would then
// wait for a writer for ever. A reader that has read everything has
// opened it.
func (fd *feed) drain(w *os.File) bool {
	wait := 50 * time.Microsecond
	for {
		n, err := fifo.Unread(w)
		if err != nil {
			fd.fail(fmt.Errorf("waiting for the engine to read a pipe: %w", err))
			return false
		}
		if n == 0 {
			return true
		}
		select {
		case <-fd.stop:
			return false
		case <-time.After(wait):
			wait = min(2*wait, 5*time.Millisecond)
		}
	}
}

func (fd *feed) fail(err error) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.err == nil {
		fd.err = err
	}
}

// errPartsUnread is Stop's error when every transfer went well but the
// engine did not read every part to its end: expected when the engine
// failed, a bug when it did not.
var errPartsUnread = errors.New("the engine read only")

// Stop ends every transfer still under way (the engine stopped reading),
// waits for them and removes the pipes. It returns an error unless every
// part was moved whole into its pipe before Stop was called: the first
// transfer's error, or that the engine did not read some part to its end.
// Once the engine has read every pipe to its EOF, every part is done.
func (fd *feed) Stop() error {
	fd.mu.Lock()
	err := fd.err
	if err == nil && fd.done < len(fd.pipes) {
		err = fmt.Errorf("%w: %d of the %d parts of the file", errPartsUnread, fd.done, len(fd.pipes))
	}
	fd.mu.Unlock()
	close(fd.stop)
	for _, w := range fd.pipes {
		w.Close()
	}
	fd.wg.Wait()
	if rerr := os.RemoveAll(fd.dir); err == nil && rerr != nil {
		err = rerr
	}
	return err
}
