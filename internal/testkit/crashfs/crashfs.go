// Package crashfs is a test file system that loses, when it "crashes",
// every write not yet made durable, as a power cut does: a kill -9 leaves
// the page cache to the kernel, a power cut does not.
//
// It is a FUSE loopback over a backing directory (go-fuse; mounting needs
// root or fusermount and /dev/fuse). Every change goes to the backing
// files at once; what a crash would lose is remembered beside them:
//
//   - a file's data is durable up to its last fsync (or fdatasync): writes
//     over durable bytes keep the bytes they replaced, and a crash puts
//     them back and cuts the file to its durable size;
//   - a file created since the mount exists durably once it, or its
//     directory, is fsynced; a crash removes it otherwise;
//   - renames, unlinks, links and directories are durable at once (a
//     journalling file system commits them in order; this model is kinder
//     there than a real disk may be).
//
// Crash unmounts (the processes using the mount must be gone: kill them
// first), undoes what was not durable in the backing directory and mounts
// it again. Files that existed before the first mount are durable as they
// were.
package crashfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted crash-prone file system.
type FS struct {
	backing, mnt string
	server       *fuse.Server

	mu    sync.Mutex
	files map[string]*fileState // by path relative to the backing root
	stats Stats
	full  bool // writes fail with ENOSPC
}

// Stats counts what a crash undid.
type Stats struct {
	Crashes      int
	FilesRemoved int   // created and never made durable
	FilesCut     int   // cut to their durable size or restored
	BytesLost    int64 // written and not durable
	// Lost names the files the last crash removed or cut, by directory
	// (relative to the root) with a count each.
	Lost map[string]int
}

// fileState is what a crash would undo in one file.
type fileState struct {
	durable     bool  // the file's existence
	durableSize int64 // its size at the last fsync
	size        int64 // its size now, as far as writes and truncations tell
	undo        []undo
}

// undo is the durable bytes a write or truncation replaced.
type undo struct {
	off int64
	old []byte
}

// Mount mounts a crash-prone view of backing at mnt.
func Mount(backing, mnt string) (*FS, error) {
	c := &FS{backing: backing, mnt: mnt, files: map[string]*fileState{}}
	if err := c.mount(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(c.backing, &st); err != nil {
		return fmt.Errorf("crashfs: %w", err)
	}
	rd := &fs.LoopbackRoot{Path: c.backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: fs.LoopbackNode{RootData: rd}, c: c}
	rd.RootNode = root
	zero := time.Duration(0)
	srv, err := fs.Mount(c.mnt, root, &fs.Options{
		// No kernel caching of attributes or entries: the backing
		// files change under the mount only between mounts, but sizes
		// must be right for every write.
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName: "crashfs", Name: "crashfs", DirectMount: true,
			// The engine's files are many; let the kernel send large writes.
			MaxWrite: 1 << 20,
		},
	})
	if err != nil {
		return fmt.Errorf("crashfs: mounting %s: %w", c.mnt, err)
	}
	c.server = srv
	return nil
}

// Dir is the mount point.
func (c *FS) Dir() string { return c.mnt }

// SetFull makes every write fail with ENOSPC, as on a full disk, until
// SetFull(false).
func (c *FS) SetFull(full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.full = full
}

func (c *FS) isFull() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.full
}

// Stats says what the crashes so far undid.
func (c *FS) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Unmount unmounts, keeping everything as it is (a clean shutdown).
func (c *FS) Unmount() error {
	if c.server == nil {
		return nil
	}
	err := c.server.Unmount()
	c.server = nil
	return err
}

// Crash unmounts, drops everything not durable and mounts again.
func (c *FS) Crash() error {
	if err := c.unmountRetry(); err != nil {
		return err
	}
	c.mu.Lock()
	paths := make([]string, 0, len(c.files))
	for p := range c.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var errs []error
	lost := map[string]int{}
	for _, p := range paths {
		changed, err := c.undoFile(p, c.files[p])
		if err != nil {
			errs = append(errs, err)
		}
		if changed {
			lost[filepath.Dir(p)]++
		}
	}
	c.files = map[string]*fileState{}
	c.stats.Crashes++
	c.stats.Lost = lost
	c.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.mount()
}

// unmountRetry unmounts; the kernel may still hold the last files for a
// moment after their process died.
func (c *FS) unmountRetry() error {
	var err error
	for range 50 {
		if err = c.Unmount(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("crashfs: unmounting %s: %w", c.mnt, err)
}

// undoFile drops what of the file at rel was not durable, and says
// whether anything was.
func (c *FS) undoFile(rel string, st *fileState) (bool, error) {
	p := filepath.Join(c.backing, rel)
	if !st.durable {
		err := os.Remove(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		if err == nil {
			c.stats.FilesRemoved++
			c.stats.BytesLost += st.size
		}
		return err == nil, nil
	}
	if len(st.undo) == 0 && st.size == st.durableSize {
		return false, nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // unlinked since: unlinks are durable
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	for i := len(st.undo) - 1; i >= 0; i-- {
		u := st.undo[i]
		if _, err := f.WriteAt(u.old, u.off); err != nil {
			return false, err
		}
		c.stats.BytesLost += int64(len(u.old))
	}
	if st.size > st.durableSize {
		c.stats.BytesLost += st.size - st.durableSize
	}
	if err := f.Truncate(st.durableSize); err != nil {
		return false, err
	}
	c.stats.FilesCut++
	return true, f.Sync()
}

// state returns the state of the file at rel, starting it (as durable, at
// its size now) for a file that existed before.
func (c *FS) state(rel string) *fileState {
	st, ok := c.files[rel]
	if !ok {
		var size int64
		if fi, err := os.Stat(filepath.Join(c.backing, rel)); err == nil {
			size = fi.Size()
		}
		st = &fileState{durable: true, durableSize: size, size: size}
		c.files[rel] = st
	}
	return st
}

// overwrite records, before a write of n bytes at off (or a truncation
// from off to the end when n < 0), the durable bytes it will replace.
func (c *FS) overwrite(rel string, off, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(rel)
	end := off + n
	if n < 0 {
		end = st.size
	}
	if st.durable && off < st.durableSize {
		hi := min(end, st.durableSize)
		old := make([]byte, hi-off)
		f, err := os.Open(filepath.Join(c.backing, rel))
		if err != nil {
			return err
		}
		_, err = f.ReadAt(old, off)
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		st.undo = append(st.undo, undo{off: off, old: old})
	}
	if n < 0 {
		st.size = off
	} else {
		st.size = max(st.size, end)
	}
	return nil
}

// synced makes the file at rel durable as it is.
func (c *FS) synced(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(rel)
	if fi, err := os.Stat(filepath.Join(c.backing, rel)); err == nil {
		st.size = fi.Size()
	}
	st.durable, st.durableSize, st.undo = true, st.size, nil
}

// dirSynced makes the names in the directory rel durable (not their data).
func (c *FS) dirSynced(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rel == "" {
		rel = "."
	}
	for p, st := range c.files {
		if filepath.Dir(p) == rel && !st.durable {
			st.durable, st.durableSize = true, 0
		}
	}
}

func (c *FS) created(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.files[rel] = &fileState{}
}

func (c *FS) removed(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.files, rel)
}

// renamed moves the states under from (a file, or a directory's files)
// to to; what was at to is gone.
func (c *FS) renamed(from, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.files {
		if p == to || strings.HasPrefix(p, to+"/") {
			delete(c.files, p)
		}
	}
	for p, st := range c.files {
		switch {
		case p == from:
			delete(c.files, p)
			c.files[to] = st
		case strings.HasPrefix(p, from+"/"):
			delete(c.files, p)
			c.files[to+p[len(from):]] = st
		}
	}
}

// node is a loopback node that tells its FS what changes.
type node struct {
	fs.LoopbackNode
	c *FS
}

// WrapChild makes every node under the root one of ours.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if _, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: n.RootData}, c: n.c}
	}
	return ops
}

var _ fs.NodeWrapChilder = (*node)(nil)

func (n *node) rel() string {
	return n.Path(n.Root())
}

func (n *node) child(name string) string {
	return filepath.Join(n.rel(), name)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	rel := n.child(name)
	_, statErr := os.Lstat(filepath.Join(n.c.backing, rel))
	if statErr == nil && flags&syscall.O_TRUNC != 0 {
		if err := n.c.overwrite(rel, 0, -1); err != nil {
			return nil, nil, 0, fs.ToErrno(err)
		}
	}
	ch, fh, ff, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return ch, fh, ff, errno
	}
	if errors.Is(statErr, os.ErrNotExist) {
		n.c.created(rel)
	}
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok { // a go-fuse whose loopback changed: nothing would be tracked
		return nil, nil, 0, syscall.EIO
	}
	return ch, &file{lf: lf, c: n.c, rel: rel}, ff, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	rel := n.rel()
	if flags&syscall.O_TRUNC != 0 {
		if err := n.c.overwrite(rel, 0, -1); err != nil {
			return nil, 0, fs.ToErrno(err)
		}
	}
	fh, ff, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, ff, errno
	}
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok { // a go-fuse whose loopback changed: nothing would be tracked
		return nil, 0, syscall.EIO
	}
	return &file{lf: lf, c: n.c, rel: rel}, ff, 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, ff, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, ff, errno
	}
	d, ok := fh.(loopbackDir)
	if !ok {
		return fh, ff, errno
	}
	return &dir{loopbackDir: d, c: n.c, rel: n.rel()}, ff, 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if err := n.c.overwrite(n.rel(), int64(sz), -1); err != nil {
			return fs.ToErrno(err)
		}
	}
	if fh, ok := f.(*file); ok {
		f = fh.lf
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if fh, ok := f.(*file); ok {
		return fh.Fsync(ctx, flags)
	}
	syscall.Sync()
	if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		n.c.dirSynced(n.rel())
	} else {
		n.c.synced(n.rel())
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	errno := n.LoopbackNode.Unlink(ctx, name)
	if errno == 0 {
		n.c.removed(n.child(name))
	}
	return errno
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	from, to := n.child(name), np.child(newName)
	errno := n.LoopbackNode.Rename(ctx, name, &np.LoopbackNode, newName, flags)
	if errno == 0 {
		n.c.renamed(from, to)
	}
	return errno
}

// file is an open file whose writes and syncs its FS hears of. It has no
// passthrough descriptor, so every write comes through here.
type file struct {
	lf  *fs.LoopbackFile
	c   *FS
	rel string
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
)

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if f.c.isFull() {
		return 0, syscall.ENOSPC
	}
	if err := f.c.overwrite(f.rel, off, int64(len(data))); err != nil {
		return 0, fs.ToErrno(err)
	}
	return f.lf.Write(ctx, data, off)
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := f.lf.Fsync(ctx, flags); errno != 0 {
		return errno
	}
	f.c.synced(f.rel)
	return 0
}

func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.lf.Flush(ctx) }
func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }
func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Setattr(ctx, in, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

func (f *file) Allocate(ctx context.Context, off uint64, sz uint64, mode uint32) syscall.Errno {
	if f.c.isFull() {
		return syscall.ENOSPC
	}
	errno := f.lf.Allocate(ctx, off, sz, mode)
	if errno == 0 {
		f.c.mu.Lock()
		st := f.c.state(f.rel)
		st.size = max(st.size, int64(off+sz))
		f.c.mu.Unlock()
	}
	return errno
}

// loopbackDir is what go-fuse's loopback directory handle does.
type loopbackDir interface {
	fs.DirStream
	fs.FileReaddirenter
	fs.FileFsyncdirer
	fs.FileSeekdirer
	fs.FileReleasedirer
}

// dir is an open directory whose fsync makes its names durable.
type dir struct {
	loopbackDir
	c   *FS
	rel string
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if errno := d.loopbackDir.Fsyncdir(ctx, flags); errno != 0 {
		return errno
	}
	d.c.dirSynced(d.rel)
	return 0
}
