export LC_ALL=C
{
  echo "code,count"
  grep -h ' ERROR \[' logs/*.log | sed -E 's/.*ERROR \[([A-Z0-9]+)\].*/\1/' \
    | sort | uniq -c | sort -k1,1nr -k2,2 | awk '{print $2 "," $1}'
} > errors.csv
cat errors.csv
