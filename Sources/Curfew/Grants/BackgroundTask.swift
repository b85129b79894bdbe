import Dispatch
import Synchronization

