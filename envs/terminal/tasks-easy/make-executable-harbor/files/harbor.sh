echo harbor
