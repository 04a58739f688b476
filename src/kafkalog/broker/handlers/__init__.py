"""One module per API family. Each handler is thin: read the decoded request, call the broker's replica
manager (or log manager, for topics), and build the response; the wire format is the protocol module's."""
