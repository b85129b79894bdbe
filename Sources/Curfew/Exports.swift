// What every client of the host library sees with it: the words the host
// shares with its jobs' SDK, and the system layer's types its own API uses
// (clocks and instants, errors, the process-wide helpers).
@_exported import CurfewSystem
@_exported import CurfewVocabulary
