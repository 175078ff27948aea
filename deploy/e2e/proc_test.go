package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Every child runs in its own process group (so a signal reaches the whole
// group and nothing else) and dies with the test binary (Pdeathsig). The
// registry lets TestMain's signal handler kill what is still running.
var (
	procMu sync.Mutex
	procs  = map[*exec.Cmd]string{}
)

func register(name string, cmd *exec.Cmd) *exec.Cmd {
	procMu.Lock()
	defer procMu.Unlock()
	procs[cmd] = name
	return cmd
}

func unregister(cmd *exec.Cmd) {
	procMu.Lock()
	defer procMu.Unlock()
	delete(procs, cmd)
}

// killAll sends SIGKILL to the process group of every registered child.
func killAll() {
	procMu.Lock()
	defer procMu.Unlock()
	for cmd := range procs {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// proc is a child process whose output goes to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // set when done is closed
}

// startProc starts bin with args, its stdout and stderr appended to
// dir/<name>.log, and stops it (group SIGTERM, then SIGKILL) when t ends.
func startProc(t *testing.T, dir, name, bin string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, dir, name, bin, nil, args...)
}

// startProcEnv is startProc with env (KEY=VALUE) added to the test's
// environment.
func startProcEnv(t *testing.T, dir, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = lf
	cmd.Stderr = lf
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	register(name, cmd)
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		unregister(cmd)
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.stop(10 * time.Second); err != nil {
			t.Logf("stopping %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("%s log (last lines, whole file %s):\n%s", name, logPath, p.logTail(40))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group and waits up to grace for the
// process to exit, then kills the group. It returns the exit error of a
// process that did not end cleanly on SIGTERM.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		// The leader is gone; make sure nothing else of its group stays.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		var ee *exec.ExitError
		if errors.As(p.err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
			return nil
		}
		return p.err
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.name, grace)
	}
}

func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}

// waitLog waits until the process's log matches re and returns the first
// submatch (or the whole match).
func (p *proc) waitLog(t *testing.T, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(p.logPath); err == nil {
			if m := re.FindSubmatch(b); m != nil {
				return string(m[len(m)-1])
			}
		}
		if p.exited() {
			t.Fatalf("%s exited (%v) before logging %q:\n%s", p.name, p.err, re, p.logTail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %s:\n%s", p.name, re, timeout, p.logTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// poll calls f every interval until it returns true or timeout passes.
func poll(timeout, interval time.Duration, f func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}
