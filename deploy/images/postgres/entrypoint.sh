#!/bin/sh
# First start: initdb with POSTGRES_USER as the superuser, its password from POSTGRES_PASSWORD
# or POSTGRES_PASSWORD_FILE (refused when neither is set), POSTGRES_DB created; every client
# over TCP authenticates with scram-sha-256. Later starts: the data directory as it is.
set -eu
if [ "$(id -u)" = 0 ]; then
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec gosu postgres "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  user="${POSTGRES_USER:-postgres}"
  if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
    [ -r "$POSTGRES_PASSWORD_FILE" ] || { echo "postgres: POSTGRES_PASSWORD_FILE=$POSTGRES_PASSWORD_FILE cannot be read" >&2; exit 1; }
    password="$(cat "$POSTGRES_PASSWORD_FILE")"
  else
    password="${POSTGRES_PASSWORD:-}"
  fi
  [ -n "$password" ] || { echo "postgres: no password: set POSTGRES_PASSWORD_FILE (a Docker secret) or POSTGRES_PASSWORD" >&2; exit 1; }
  pwfile="$(mktemp)"
  printf '%s\n' "$password" > "$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  if [ -n "${POSTGRES_DB:-}" ] && [ "$POSTGRES_DB" != postgres ]; then
    postgres --single -D "$PGDATA" -c listen_addresses='' postgres <<SQL >/dev/null
CREATE DATABASE "$POSTGRES_DB" OWNER "$user";
SQL
  fi
  echo "postgres: initialised $PGDATA (superuser $user, database ${POSTGRES_DB:-postgres})"
fi
if [ "${1:-}" = postgres ]; then
  shift
  exec postgres -D "$PGDATA" "$@"
fi
exec "$@"
