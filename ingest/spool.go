package ingest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/auditlens/auditlens/internal/health"
	"github.com/auditlens/auditlens/store"
)

// The spool is the webhook's promise to the apiserver. A batch is answered
// 200 only after its events are in a spool segment and that segment has been
// fsync'd; the writer then moves them into the store at its own pace and
// records how far it got in a checkpoint file. A restart replays every record
// after the checkpoint. Replaying a record that was stored but not yet
// checkpointed is harmless: the writer drops events whose (cluster, auditID,
// stage) the store already holds.
//
// Layout of dir:
//
//	0000000000000001.seg   segments, named by the sequence number of their first record
//	checkpoint             the highest sequence number known to be stored
//
// A record is: uint32 payload length, uint32 CRC-32C of the payload, uint64
// sequence number (all little endian), then the payload: uvarint length +
// source, then for each event uvarint length + event JSON. The source is
// the cluster name, or "cluster/apiserver" when the sender named its
// apiserver (names hold no '/'; records written before apiservers were
// named read as the cluster alone). A record
// torn by a crash fails its length or CRC check; it was never acknowledged,
// so it is cut off when the spool is opened.

const (
	recordHeader   = 16
	maxRecordBytes = 1 << 30
	checkpointName = "checkpoint"
	segmentSuffix  = ".seg"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrSpoolClosed is returned by Append after Close.
var ErrSpoolClosed = errors.New("spool closed")

// SpoolConfig configures a Spool.
type SpoolConfig struct {
	// Dir holds the segments and the checkpoint. Created if missing.
	Dir string
	// SegmentBytes is the size after which a new segment is started
	// (default 64 MiB). Fully stored segments are deleted.
	SegmentBytes int64
	// CacheRows bounds the decoded rows kept in memory beside durable
	// records (default 100000), so the writer need not decode again what
	// the webhook just decoded. Records beyond it are decoded from disk.
	CacheRows int
	Logger    *slog.Logger
}

// Record is one acknowledged webhook batch.
type Record struct {
	Seq       uint64
	Cluster   string
	APIServer string // "" when the sender did not name it
	Events    [][]byte
	// Rows are the events already decoded, when the spool still had them
	// in memory; nil otherwise.
	Rows []store.Row
}

type segment struct {
	first, last uint64 // sequence numbers; last < first when empty
	path        string
	size        int64 // durable size
}

type appendReq struct {
	payload []byte
	rows    []store.Row
	done    chan error
}

// Spool is a durable, append-only queue of acknowledged batches with group
// commit: concurrent Appends share one write and one fsync.
type Spool struct {
	cfg  SpoolConfig
	log  *slog.Logger
	reqs chan appendReq
	quit chan struct{}
	wg   sync.WaitGroup

	// Owned by the committer goroutine.
	active  *os.File
	nextSeq uint64

	mu        sync.Mutex
	segs      []*segment // ordered by first
	committed uint64
	closed    bool
	notify    chan struct{}
	cache     map[uint64][]store.Row // decoded rows of durable records, by sequence number
	cached    int                    // rows in cache

	health *health.Condition // the disk takes writes
}

// OpenSpool opens or creates a spool, cutting off a torn tail left by a crash.
func OpenSpool(cfg SpoolConfig) (*Spool, error) {
	if cfg.Dir == "" {
		return nil, errors.New("spool: no directory configured")
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 64 << 20
	}
	if cfg.CacheRows == 0 {
		cfg.CacheRows = 100000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating spool directory: %w", err)
	}
	s := &Spool{
		cfg:    cfg,
		log:    cfg.Logger,
		reqs:   make(chan appendReq, 1024),
		quit:   make(chan struct{}),
		notify: make(chan struct{}, 1),
		cache:  map[uint64][]store.Row{},
		health: health.NewCondition("spool", "the receivers answer 503 and senders keep their events until the disk takes writes again", cfg.Logger, nil),
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.commitLoop()
	return s, nil
}

func (s *Spool) load() error {
	b, err := os.ReadFile(filepath.Join(s.cfg.Dir, checkpointName))
	switch {
	case err == nil:
		n, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if perr != nil {
			return fmt.Errorf("spool checkpoint %q: %w", b, perr)
		}
		s.committed = n
	case errors.Is(err, os.ErrNotExist):
	default:
		return fmt.Errorf("reading spool checkpoint: %w", err)
	}
	names, err := filepath.Glob(filepath.Join(s.cfg.Dir, "*"+segmentSuffix))
	if err != nil {
		return err
	}
	sort.Strings(names)
	s.nextSeq = s.committed + 1
	for i, name := range names {
		first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(name), segmentSuffix), 16, 64)
		if err != nil {
			return fmt.Errorf("spool segment %s: bad name", name)
		}
		seg := &segment{first: first, last: first - 1, path: name}
		good, last, err := scanSegment(name)
		if err != nil {
			return err
		}
		fi, err := os.Stat(name)
		if err != nil {
			return err
		}
		if good < fi.Size() {
			if i != len(names)-1 {
				s.log.Warn("spool segment has a damaged record before the newest segment; truncating", "segment", name, "at", good)
			} else {
				s.log.Warn("spool: cutting off a torn record left by a crash", "segment", name, "at", good)
			}
			if err := os.Truncate(name, good); err != nil {
				return fmt.Errorf("truncating torn spool segment: %w", err)
			}
		}
		seg.size = good
		if last != 0 {
			seg.last = last
			if last+1 > s.nextSeq {
				s.nextSeq = last + 1
			}
		}
		if first > s.nextSeq {
			s.nextSeq = first
		}
		s.segs = append(s.segs, seg)
	}
	s.dropStoredSegments()
	return s.openActive()
}

// scanSegment returns the size of the valid prefix and the last sequence
// number in it.
func scanSegment(path string) (int64, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("opening spool segment: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	var last uint64
	for {
		rec, n, err := readRecord(r, nil)
		if err != nil {
			return off, last, nil //nolint:nilerr // a torn or damaged tail ends the valid prefix
		}
		off += n
		last = rec
	}
}

// readRecord reads one record, returning its sequence number and length; the
// payload is appended to *payload when payload is not nil.
func readRecord(r io.Reader, payload *[]byte) (uint64, int64, error) {
	var hdr [recordHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	n := binary.LittleEndian.Uint32(hdr[0:])
	sum := binary.LittleEndian.Uint32(hdr[4:])
	seq := binary.LittleEndian.Uint64(hdr[8:])
	if n > maxRecordBytes || seq == 0 {
		return 0, 0, errors.New("spool: bad record header")
	}
	var buf []byte
	if payload != nil {
		buf = (*payload)[:0]
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, 0, err
	}
	if crc32.Checksum(buf, crcTable) != sum {
		return 0, 0, errors.New("spool: record checksum mismatch")
	}
	if payload != nil {
		*payload = buf
	}
	return seq, int64(recordHeader) + int64(n), nil
}

func (s *Spool) openActive() error {
	var seg *segment
	if len(s.segs) > 0 {
		seg = s.segs[len(s.segs)-1]
		if seg.size >= s.cfg.SegmentBytes {
			seg = nil
		}
	}
	if seg == nil {
		seg = &segment{first: s.nextSeq, last: s.nextSeq - 1, path: filepath.Join(s.cfg.Dir, fmt.Sprintf("%016x%s", s.nextSeq, segmentSuffix))}
		s.segs = append(s.segs, seg)
	}
	f, err := os.OpenFile(seg.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening spool segment: %w", err)
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		f.Close()
		return err
	}
	if s.active != nil {
		s.active.Close()
	}
	s.active = f
	return nil
}

// AppendRows durably stores the raw events of decoded rows and their
// source, and returns once they are on disk. The rows are kept in memory
// for the writer while the cache has room.
func (s *Spool) AppendRows(ctx context.Context, src Source, rows []store.Row) error {
	events := make([][]byte, len(rows))
	for i := range rows {
		events[i] = rows[i].Raw
	}
	return s.append(ctx, src, events, rows)
}

// Append durably stores one batch of events from src and returns once
// they are on disk.
func (s *Spool) Append(ctx context.Context, src Source, events [][]byte) error {
	return s.append(ctx, src, events, nil)
}

func (s *Spool) append(ctx context.Context, src Source, events [][]byte, rows []store.Row) error {
	source := src.String()
	size := binary.MaxVarintLen64 + len(source)
	for _, e := range events {
		size += binary.MaxVarintLen64 + len(e)
	}
	p := make([]byte, recordHeader, recordHeader+size)
	p = binary.AppendUvarint(p, uint64(len(source)))
	p = append(p, source...)
	for _, e := range events {
		p = binary.AppendUvarint(p, uint64(len(e)))
		p = append(p, e...)
	}
	if len(p)-recordHeader > maxRecordBytes {
		return fmt.Errorf("spool: batch of %d bytes is larger than a record may be", len(p))
	}
	req := appendReq{payload: p, rows: rows, done: make(chan error, 1)}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrSpoolClosed
	}
	select {
	case s.reqs <- req:
	case <-s.quit:
		return ErrSpoolClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, the record will be written; wait for the fsync even if
	// the caller gives up, so that an answer never precedes durability.
	return <-req.done
}

func (s *Spool) commitLoop() {
	defer s.wg.Done()
	var batch []appendReq
	var buf []byte
	for {
		batch = batch[:0]
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		case <-s.quit:
			// Drain what was queued before Close.
			for {
				select {
				case r := <-s.reqs:
					batch = append(batch, r)
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				s.writeBatch(batch, buf)
			}
			return
		}
	more:
		for len(batch) < 4096 {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		buf = s.writeBatch(batch, buf)
	}
}

func (s *Spool) writeBatch(batch []appendReq, buf []byte) []byte {
	buf = buf[:0]
	first := s.nextSeq
	for i := range batch {
		p := batch[i].payload
		body := p[recordHeader:]
		binary.LittleEndian.PutUint32(p[0:], uint32(len(body)))
		binary.LittleEndian.PutUint32(p[4:], crc32.Checksum(body, crcTable))
		binary.LittleEndian.PutUint64(p[8:], s.nextSeq)
		s.nextSeq++
		buf = append(buf, p...)
	}
	err := s.writeSync(buf)
	if err != nil {
		// Nothing of this batch counts; roll the sequence back so the next
		// attempt reuses the numbers, and cut whatever part was written.
		s.nextSeq = first
		s.mu.Lock()
		seg := s.segs[len(s.segs)-1]
		size := seg.size
		s.mu.Unlock()
		err = fmt.Errorf("writing to spool: %w", err)
		if terr := s.active.Truncate(size); terr != nil {
			err = fmt.Errorf("%w (and cutting what part of it was written: %v)", err, terr)
		}
		s.health.Fail(err)
	} else {
		s.health.OK()
		s.mu.Lock()
		seg := s.segs[len(s.segs)-1]
		seg.size += int64(len(buf))
		seg.last = s.nextSeq - 1
		roll := seg.size >= s.cfg.SegmentBytes
		for i := range batch {
			if n := len(batch[i].rows); n > 0 && s.cached+n <= s.cfg.CacheRows {
				s.cache[first+uint64(i)] = batch[i].rows
				s.cached += n
			}
		}
		s.mu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
		if roll {
			s.mu.Lock()
			if rerr := s.openActive(); rerr != nil {
				s.log.Error("spool: starting a new segment", "err", rerr)
			}
			s.mu.Unlock()
		}
	}
	for _, r := range batch {
		r.done <- err
	}
	return buf
}

func (s *Spool) writeSync(b []byte) error {
	if _, err := s.active.Write(b); err != nil {
		return err
	}
	return s.active.Sync()
}

// Health says whether the spool takes writes: it fails from a failed
// write to the next that succeeds.
func (s *Spool) Health() *health.Condition { return s.health }

// Notify returns a channel that receives after new records became durable.
func (s *Spool) Notify() <-chan struct{} { return s.notify }

// Commit records that every record up to and including seq is in the store,
// and deletes segments that hold nothing newer.
func (s *Spool) Commit(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.committed {
		return nil
	}
	tmp := filepath.Join(s.cfg.Dir, checkpointName+".tmp")
	if err := writeFileSync(tmp, []byte(strconv.FormatUint(seq, 10)+"\n")); err != nil {
		return fmt.Errorf("writing spool checkpoint: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.cfg.Dir, checkpointName)); err != nil {
		return fmt.Errorf("writing spool checkpoint: %w", err)
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		return err
	}
	s.committed = seq
	for q, rows := range s.cache {
		if q <= seq {
			s.cached -= len(rows)
			delete(s.cache, q)
		}
	}
	s.dropStoredSegments()
	return nil
}

// takeRows returns and forgets the cached decoded rows of record seq.
func (s *Spool) takeRows(seq uint64) []store.Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows, ok := s.cache[seq]
	if ok {
		delete(s.cache, seq)
		s.cached -= len(rows)
	}
	return rows
}

// dropStoredSegments deletes every segment but the newest whose records are
// all committed. Called with mu held (or before the spool is shared).
func (s *Spool) dropStoredSegments() {
	for len(s.segs) > 1 && s.segs[0].last <= s.committed && s.segs[0].last+1 >= s.segs[0].first {
		if err := os.Remove(s.segs[0].path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("spool: removing a stored segment", "segment", s.segs[0].path, "err", err)
			return
		}
		s.segs = s.segs[1:]
	}
}

// Stats describes what the spool holds.
type SpoolStats struct {
	Segments       int
	Bytes          int64  // on disk
	Committed      uint64 // highest stored sequence number
	Newest         uint64 // highest durable sequence number
	PendingRecords uint64
}

// Stats returns the spool's current depth.
func (s *Spool) Stats() SpoolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SpoolStats{Segments: len(s.segs), Committed: s.committed}
	for _, seg := range s.segs {
		st.Bytes += seg.size
		if seg.last+1 > seg.first && seg.last > st.Newest {
			st.Newest = seg.last
		}
	}
	if st.Newest > st.Committed {
		st.PendingRecords = st.Newest - st.Committed
	}
	return st
}

// Close stops accepting appends, finishes queued ones and closes the files.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.quit)
	s.wg.Wait()
	return s.active.Close()
}

// SpoolReader reads durable records after the checkpoint, in order.
type SpoolReader struct {
	s       *Spool
	f       *os.File
	r       *bufio.Reader
	segPath string
	off     int64
	next    uint64 // next sequence number wanted
	payload []byte
}

// Reader returns a reader positioned after the last committed record.
func (s *Spool) Reader() *SpoolReader {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &SpoolReader{s: s, next: s.committed + 1}
}

// Next returns the next durable record, or ok=false when none is available
// yet. Records are returned once each, in sequence order.
func (r *SpoolReader) Next() (rec Record, ok bool, err error) {
	for {
		r.s.mu.Lock()
		var seg *segment
		for _, sg := range r.s.segs {
			if sg.first <= r.next && r.next <= sg.last {
				seg = sg
				break
			}
		}
		var size int64
		if seg != nil {
			size = seg.size
		}
		r.s.mu.Unlock()
		if seg == nil {
			return Record{}, false, nil
		}
		if r.segPath != seg.path {
			if r.f != nil {
				r.f.Close()
			}
			f, err := os.Open(seg.path)
			if err != nil {
				return Record{}, false, fmt.Errorf("reading spool: %w", err)
			}
			r.f, r.segPath, r.off = f, seg.path, 0
			r.r = bufio.NewReaderSize(io.LimitReader(f, size), 1<<20)
		}
		if r.off >= size {
			return Record{}, false, nil
		}
		// Refresh the limit to the durable size seen now.
		if _, err := r.f.Seek(r.off, io.SeekStart); err != nil {
			return Record{}, false, err
		}
		r.r.Reset(io.LimitReader(r.f, size-r.off))
		for r.off < size {
			seq, n, err := readRecord(r.r, &r.payload)
			if err != nil {
				return Record{}, false, fmt.Errorf("reading spool segment %s at %d: %w", r.segPath, r.off, err)
			}
			r.off += n
			if seq < r.next {
				continue
			}
			r.next = seq + 1
			if rows := r.s.takeRows(seq); rows != nil {
				return Record{Seq: seq, Cluster: rows[0].Cluster, APIServer: rows[0].APIServer, Rows: rows}, true, nil
			}
			rec, err := decodePayload(seq, r.payload)
			if err != nil {
				return Record{}, false, err
			}
			return rec, true, nil
		}
	}
}

// Close releases the reader's file.
func (r *SpoolReader) Close() error {
	if r.f != nil {
		return r.f.Close()
	}
	return nil
}

func decodePayload(seq uint64, p []byte) (Record, error) {
	rec := Record{Seq: seq}
	n, k := binary.Uvarint(p)
	if k <= 0 || uint64(len(p)-k) < n {
		return rec, fmt.Errorf("spool record %d: bad source field", seq)
	}
	rec.Cluster, rec.APIServer, _ = strings.Cut(string(p[k:k+int(n)]), "/")
	p = p[k+int(n):]
	for len(p) > 0 {
		n, k := binary.Uvarint(p)
		if k <= 0 || uint64(len(p)-k) < n {
			return rec, fmt.Errorf("spool record %d: bad event field", seq)
		}
		e := make([]byte, n)
		copy(e, p[k:k+int(n)])
		rec.Events = append(rec.Events, e)
		p = p[k+int(n):]
	}
	return rec, nil
}

func writeFileSync(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing spool directory: %w", err)
	}
	return nil
}
