export LC_ALL=C
tr -cs 'A-Za-z' '\n' < book.txt | tr 'A-Z' 'a-z' | grep -v '^$' \
  | sort | uniq -c | sort -k1,1nr -k2,2 | head -n 10 | awk '{print $1, $2}' > top10.txt
cat top10.txt
