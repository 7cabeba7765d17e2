#!/bin/sh
# As the official redis image does: `redis-server …` runs with protected mode off (the stacks
# reach Redis over their private network only) unless the command sets it.
set -eu
if [ "${1:-}" = redis-server ]; then
  case " $* " in *" --protected-mode "*) ;; *) set -- "$@" --protected-mode no ;; esac
fi
exec "$@"
