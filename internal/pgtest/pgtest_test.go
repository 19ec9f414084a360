package pgtest

import (
	"context"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestWithDatabase(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:p@localhost:5432/postgres?sslmode=disable", "postgres://u:p@localhost:5432/test_x?sslmode=disable"},
		{"postgresql://u@/postgres?host=/tmp/s", "postgresql://u@/test_x?host=/tmp/s"},
		{"host=/tmp/s port=5432 user=postgres dbname=postgres", "host=/tmp/s port=5432 user=postgres dbname=postgres dbname=test_x"},
	}
	for _, tt := range tests {
		if got := withDatabase(tt.in, "test_x"); got != tt.want {
			t.Errorf("withDatabase(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDatabasesAreSeparate(t *testing.T) {
	ctx := context.Background()
	a, b := NewPool(t), NewPool(t)
	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (v int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a table created in one test database is visible in another")
	}
}
