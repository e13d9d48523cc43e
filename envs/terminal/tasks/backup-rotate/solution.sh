cat > rotate.sh <<'SH'
#!/bin/bash
# Keeps the N newest backup-YYYYMMDD.tar.gz files in DIR; prints what it deletes, oldest first.
usage() { echo "usage: rotate.sh DIR N  (N: backups to keep, >= 0)" >&2; exit 2; }
[ $# -eq 2 ] || usage
dir=$1 keep=$2
[[ $keep =~ ^[0-9]+$ ]] || usage
[ -d "$dir" ] || usage
mapfile -t backups < <(find "$dir" -mindepth 1 -maxdepth 1 -type f -printf '%f\n' \
  | grep -E '^backup-[0-9]{8}\.tar\.gz$' | LC_ALL=C sort)
drop=$(( ${#backups[@]} - 10#$keep ))
for ((i = 0; i < drop; i++)); do
  rm -f -- "$dir/${backups[i]}"
  printf '%s\n' "${backups[i]}"
done
SH
chmod +x rotate.sh
mkdir -p rotate-demo && touch rotate-demo/backup-2026010{1,2,3}.tar.gz
./rotate.sh rotate-demo 1; ./rotate.sh; echo "exit $?"
rm -rf rotate-demo
