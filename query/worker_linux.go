package query

import "syscall"

// workerSysProcAttr puts a worker in its own process group, so that a
// Ctrl-C at the terminal reaches only its parent (which ends its queries
// in order), and has the kernel kill it when the parent dies. (Pdeathsig
// fires when the thread that started the worker exits; Go keeps its
// threads alive unless a goroutine locked to one exits while locked.)
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// selfExecutable is the file this process runs, even when it was
// replaced on disk since it started.
func selfExecutable() (string, error) { return "/proc/self/exe", nil }
