mv piano.txt done.txt
