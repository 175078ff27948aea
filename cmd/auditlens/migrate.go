package main

import (
	"context"
	"fmt"
	"io"

	"github.com/auditlens/auditlens/migrations"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", "--store URL [--print]", stderr)
	var sf storeFlags
	sf.register(fs, "chdb://./data/clickhouse")
	fs.StringVar(&sf.database, "database", "", "database that holds the tables (for --on-cluster)")
	printOnly := fs.Bool("print", false, "print the statements instead of running them")
	logLevel := logLevelFlag(fs, "info")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *printOnly {
		cfg, err := sf.migrationConfig()
		if err != nil {
			return err
		}
		stmts, err := migrations.Render(cfg)
		if err != nil {
			return err
		}
		for _, s := range stmts {
			fmt.Fprintf(stdout, "%s;\n\n", s)
		}
		return nil
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	st, err := sf.open(ctx, log)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Fprintf(stdout, "schema of %s is up to date\n", sf.url)
	return nil
}
